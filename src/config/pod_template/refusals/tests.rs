use serde_json::{Value, json};

use super::*;
use crate::config::pod_template::parse;

/// The pool's `docker_config_secret` and an `image_pull_secrets` entry.
fn credentials() -> Vec<String> {
    vec!["regcred".into(), "mirror-pull".into()]
}

fn template(yaml: &str) -> Value {
    parse(yaml, "template.yaml").unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

fn refused(yaml: &str, privileged: bool) -> Vec<Refusal> {
    let credentials = credentials();
    refusals(&template(yaml), &Allowance { privileged, credential_secrets: &credentials })
}

/// What restricted wants set on a container that runs as the template wrote it.
const SC: &str = "allowPrivilegeEscalation: false, capabilities: { drop: [ALL] }";

/// A template with one sidecar beside the build, its securityContext `SC` and `extra`.
fn sidecar(extra: &str, fields: &str) -> String {
    format!(
        "spec:\n  containers:\n  - {{ name: proxy, image: 'proxy:1', securityContext: {{ {SC}{extra} }}{fields} }}\n"
    )
}

/// A sidecar with this whole securityContext.
fn sidecar_with(context: &str, fields: &str) -> String {
    format!("spec:\n  containers:\n  - {{ name: proxy, image: 'proxy:1', securityContext: {{ {context} }}{fields} }}\n")
}

/// One init container of the template's own, as `sidecar`.
fn init(extra: &str) -> String {
    format!("spec:\n  initContainers:\n  - {{ name: certs, image: 'busybox:1', securityContext: {{ {SC}{extra} }} }}\n")
}

fn pod(fields: &str) -> String {
    format!("spec:\n{fields}\n")
}

/// `volumes` and one container (by its YAML) mounting `mount` at /mnt.
fn mounted(container: &str, volumes: &str, mount: &str) -> String {
    format!(
        "spec:\n  volumes: {volumes}\n  containers:\n  - {{ {container}, volumeMounts: [{{ name: {mount}, mountPath: /mnt }}] }}\n"
    )
}

const PROXY: &str = "name: proxy, image: 'proxy:1', securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: [ALL] } }";

/// Each variant: the template, the one field refused, and a word of why.
fn variants() -> Vec<(String, &'static str, &'static str)> {
    let build_with = |fields: &str| format!("spec:\n  containers:\n  - {{ name: build, {fields} }}\n");
    vec![
        // A command of the template's own in a build container, next to /docker-config.
        (
            build_with("lifecycle: { postStart: { exec: { command: [sh, -c, 'cat /docker-config/config.json'] } } }"),
            "spec.containers[name=build].lifecycle",
            "next to its registry credentials",
        ),
        (
            "spec:\n  containers:\n  - { name: rebase, lifecycle: { preStop: { exec: { command: [sh] } } } }\n".into(),
            "spec.containers[name=rebase].lifecycle",
            "next to its registry credentials",
        ),
        (build_with("livenessProbe: { exec: { command: [cat, /docker-config/config.json] } }"), "spec.containers[name=build].livenessProbe.exec", "probe"),
        (build_with("readinessProbe: { exec: { command: [sh] } }"), "spec.containers[name=build].readinessProbe.exec", "probe"),
        (
            "spec:\n  containers:\n  - { name: rebase, startupProbe: { exec: { command: [sh] } } }\n".into(),
            "spec.containers[name=rebase].startupProbe.exec",
            "probe",
        ),
        (
            "spec:\n  initContainers:\n  - { name: source, restartPolicy: Always }\n".into(),
            "spec.initContainers[name=source].restartPolicy",
            "restarting sidecar",
        ),
        (
            mounted("name: build", "[{ name: tools, configMap: { name: tools } }]", "tools").replace("/mnt", "/cnb/lifecycle"),
            "spec.containers[name=build].volumeMounts[mountPath=/cnb/lifecycle]",
            "stand in for the builder's lifecycle",
        ),
        (
            mounted("name: rebase", "[{ name: tools, configMap: { name: tools } }]", "tools").replace("/mnt", "/layers/../cnb/lifecycle/rebaser"),
            "spec.containers[name=rebase].volumeMounts[mountPath=/layers/../cnb/lifecycle/rebaser]",
            "stand in for the builder's lifecycle",
        ),
        (build_with("env: [{ name: LD_PRELOAD, value: /mnt/hook.so }]"), "spec.containers[name=build].env[name=LD_PRELOAD]", "load the template's own code"),
        (build_with("envFrom: [{ configMapRef: { name: build-env } }]"), "spec.containers[name=build].envFrom[0].configMapRef", "not known to check"),
        // The registry credentials' Secret, by any volume name, or through the environment.
        (
            mounted(PROXY, "[{ name: creds, secret: { secretName: regcred } }]", "creds"),
            "spec.volumes[name=creds].secret.secretName",
            "registry credentials",
        ),
        (
            mounted(PROXY, "[{ name: pulls, secret: { secretName: mirror-pull } }]", "pulls"),
            "spec.volumes[name=pulls].secret.secretName",
            "registry credentials",
        ),
        (
            mounted(PROXY, "[{ name: all, projected: { sources: [{ configMap: { name: ca } }, { secret: { name: regcred } }] } }]", "all"),
            "spec.volumes[name=all].projected.sources[1].secret.name",
            "registry credentials",
        ),
        (
            sidecar("", ", env: [{ name: AUTH, valueFrom: { secretKeyRef: { name: regcred, key: .dockerconfigjson } } }]"),
            "spec.containers[name=proxy].env[name=AUTH].valueFrom.secretKeyRef",
            "registry credentials",
        ),
        (
            sidecar("", ", envFrom: [{ configMapRef: { name: c } }, { secretRef: { name: regcred } }]"),
            "spec.containers[name=proxy].envFrom[1].secretRef",
            "registry credentials",
        ),
        (pod("  shareProcessNamespace: true"), "spec.shareProcessNamespace", "/docker-config through /proc"),
        // Other Secrets into the build's container.
        (
            mounted("name: build", "[{ name: tokens, secret: { secretName: npm-token } }]", "tokens"),
            "spec.containers[name=build].volumeMounts[mountPath=/mnt]",
            "a Secret in the build's container",
        ),
        (
            mounted("name: rebase", "[{ name: p, projected: { sources: [{ secret: { name: signing-key } }] } }]", "p"),
            "spec.containers[name=rebase].volumeMounts[mountPath=/mnt]",
            "a Secret in the build's container",
        ),
        (
            build_with("env: [{ name: NPM_TOKEN, valueFrom: { secretKeyRef: { name: npm, key: token } } }]"),
            "spec.containers[name=build].env[name=NPM_TOKEN].valueFrom.secretKeyRef",
            "a Secret in the build's container",
        ),
        (build_with("envFrom: [{ secretRef: { name: npm } }]"), "spec.containers[name=build].envFrom[0].secretRef", "a Secret in the build's container"),
        (build_with("env: [{ name: R, valueFrom: { secretKeyRef: { name: regcred, key: k } } }]"), "spec.containers[name=build].env[name=R].valueFrom.secretKeyRef", "registry credentials"),
        // An identity of the pod's own.
        (pod("  serviceAccountName: deployer"), "spec.serviceAccountName", "identity of its own"),
        (pod("  serviceAccount: deployer"), "spec.serviceAccount", "identity of its own"),
        (pod("  automountServiceAccountToken: true"), "spec.automountServiceAccountToken", "identity of its own"),
        (
            mounted(PROXY, "[{ name: token, projected: { sources: [{ serviceAccountToken: { path: token, audience: vault } }] } }]", "token"),
            "spec.volumes[name=token].projected.sources[0].serviceAccountToken",
            "identity of its own",
        ),
        // Scheduling past the scheduler, or over the cluster's own components.
        (pod("  nodeName: node-1"), "spec.nodeName", "past the scheduler"),
        (pod("  priorityClassName: system-node-critical"), "spec.priorityClassName", "system priority class"),
        (pod("  priorityClassName: system-cluster-critical"), "spec.priorityClassName", "system priority class"),
        // Pod Security "baseline".
        (pod("  hostNetwork: true"), "spec.hostNetwork", "\"baseline\""),
        (pod("  hostPID: true"), "spec.hostPID", "\"baseline\""),
        (pod("  hostIPC: true"), "spec.hostIPC", "\"baseline\""),
        (sidecar(", privileged: true", ""), "spec.containers[name=proxy].securityContext.privileged", "\"baseline\""),
        (
            mounted(PROXY, "[{ name: docker, hostPath: { path: /var/run/docker.sock } }]", "docker"),
            "spec.volumes[name=docker].hostPath",
            "\"baseline\"",
        ),
        (sidecar("", ", ports: [{ containerPort: 3128, hostPort: 3128 }]"), "spec.containers[name=proxy].ports[0].hostPort", "\"baseline\""),
        (
            sidecar(", seLinuxOptions: { type: spc_t }", ""),
            "spec.containers[name=proxy].securityContext.seLinuxOptions.type",
            "\"baseline\"",
        ),
        (
            pod("  securityContext: { seLinuxOptions: { user: system_u } }"),
            "spec.securityContext.seLinuxOptions.user",
            "\"baseline\"",
        ),
        (init(", seLinuxOptions: { role: sysadm_r }"), "spec.initContainers[name=certs].securityContext.seLinuxOptions.role", "\"baseline\""),
        (sidecar(", procMount: Unmasked", ""), "spec.containers[name=proxy].securityContext.procMount", "\"baseline\""),
        (sidecar(", seccompProfile: { type: Unconfined }", ""), "spec.containers[name=proxy].securityContext.seccompProfile.type", "\"baseline\""),
        (pod("  securityContext: { seccompProfile: { type: Unconfined } }"), "spec.securityContext.seccompProfile.type", "\"baseline\""),
        (init(", appArmorProfile: { type: Unconfined }"), "spec.initContainers[name=certs].securityContext.appArmorProfile.type", "\"baseline\""),
        (
            "metadata:\n  annotations: { container.apparmor.security.beta.kubernetes.io/proxy: unconfined }\n".into(),
            "metadata.annotations.container.apparmor.security.beta.kubernetes.io/proxy",
            "\"baseline\"",
        ),
        (
            "metadata:\n  annotations: { seccomp.security.alpha.kubernetes.io/pod: unconfined }\n".into(),
            "metadata.annotations.seccomp.security.alpha.kubernetes.io/pod",
            "\"baseline\"",
        ),
        (
            pod("  securityContext: { windowsOptions: { hostProcess: true } }"),
            "spec.securityContext.windowsOptions.hostProcess",
            "\"baseline\"",
        ),
        (
            sidecar(", windowsOptions: { hostProcess: true }", ""),
            "spec.containers[name=proxy].securityContext.windowsOptions.hostProcess",
            "\"baseline\"",
        ),
        (
            pod("  securityContext: { sysctls: [{ name: kernel.msgmax, value: '65536' }] }"),
            "spec.securityContext.sysctls[name=kernel.msgmax].name",
            "\"baseline\"",
        ),
        // Pod Security "restricted".
        (sidecar(", runAsUser: 0", ""), "spec.containers[name=proxy].securityContext.runAsUser", "\"restricted\""),
        (init(", runAsUser: 0"), "spec.initContainers[name=certs].securityContext.runAsUser", "\"restricted\""),
        (pod("  securityContext: { runAsUser: 0 }"), "spec.securityContext.runAsUser", "\"restricted\""),
        (sidecar(", runAsNonRoot: false", ""), "spec.containers[name=proxy].securityContext.runAsNonRoot", "\"restricted\""),
        (
            "spec:\n  initContainers:\n  - { name: certs, image: 'busybox:1', securityContext: { allowPrivilegeEscalation: true, capabilities: { drop: [ALL] } } }\n".into(),
            "spec.initContainers[name=certs].securityContext.allowPrivilegeEscalation",
            "\"restricted\"",
        ),
        (
            "spec:\n  containers:\n  - { name: proxy, image: 'proxy:1', securityContext: { capabilities: { drop: [ALL] } } }\n".into(),
            "spec.containers[name=proxy].securityContext.allowPrivilegeEscalation",
            "\"restricted\" requires it false",
        ),
        (
            "spec:\n  containers:\n  - { name: proxy, image: 'proxy:1', securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: [NET_RAW] } } }\n".into(),
            "spec.containers[name=proxy].securityContext.capabilities.drop",
            "requires it to hold ALL",
        ),
        (
            "spec:\n  initContainers:\n  - { name: certs, image: 'busybox:1', securityContext: { allowPrivilegeEscalation: false } }\n".into(),
            "spec.initContainers[name=certs].securityContext.capabilities.drop",
            "requires it to hold ALL",
        ),
        (sidecar_with("allowPrivilegeEscalation: false, capabilities: { drop: [ALL], add: [SYS_ADMIN] }", ""), "spec.containers[name=proxy].securityContext.capabilities.add", "\"restricted\""),
        (
            "spec:\n  initContainers:\n  - { name: certs, image: 'busybox:1', securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: [ALL], add: [CHOWN] } } }\n".into(),
            "spec.initContainers[name=certs].securityContext.capabilities.add",
            "\"restricted\"",
        ),
        (mounted(PROXY, "[{ name: shared, nfs: { server: nfs, path: /builds } }]", "shared"), "spec.volumes[name=shared].nfs", "\"restricted\""),
        (mounted(PROXY, "[{ name: repo, gitRepo: { repository: 'https://example.com/r.git' } }]", "repo"), "spec.volumes[name=repo].gitRepo", "\"restricted\""),
        (mounted(PROXY, "[{ name: fs, cephfs: { monitors: [m] } }]", "fs"), "spec.volumes[name=fs].cephfs", "\"restricted\""),
        // A container named like a build container runs as written in the other kind of build pod.
        (
            "spec:\n  containers:\n  - { name: rebase, image: 'evil:1', securityContext: { allowPrivilegeEscalation: false } }\n".into(),
            "spec.containers[name=rebase].securityContext.capabilities.drop",
            "requires it to hold ALL",
        ),
        // Refused outright: an API server refuses a pod created with them.
        (
            "spec:\n  ephemeralContainers:\n  - { name: debug, image: 'busybox:1' }\n".into(),
            "spec.ephemeralContainers[name=debug]",
            "refuses them on create",
        ),
    ]
}

/// The issue "Close what an attack on deploys, Git write-back and pod templates found", item 7:
/// without allow_privileged, every way to the credentials, to an identity, or to what Pod Security
/// refuses is refused, each by its own field and why.
#[test]
fn each_variant_is_refused_by_its_field_and_why() {
    let variants = variants();
    assert!(variants.len() >= 40, "{} variants", variants.len());
    for (yaml, field, why) in &variants {
        let found = refused(yaml, false);
        let fields: Vec<&str> = found.iter().map(|r| r.field.as_str()).collect();
        assert_eq!(fields, [*field], "{yaml}");
        assert!(found[0].why.contains(why), "{field}: {:?} lacks {why:?}", found[0].why);
        // Only what no pool may allow says so; the rest names allow_privileged as the way.
        assert_eq!(found[0].fix == Fix::RemoveAlways, field.starts_with("spec.ephemeralContainers"), "{field}");
    }
}

#[test]
fn allow_privileged_allows_every_variant_but_ephemeral_containers() {
    for (yaml, field, _) in variants() {
        let found = refused(&yaml, true);
        if field.starts_with("spec.ephemeralContainers") {
            assert_eq!(found.len(), 1, "{yaml}");
            assert_eq!(found[0].fix, Fix::RemoveAlways);
        } else {
            assert_eq!(found, [], "{yaml}");
        }
    }
}

#[test]
fn a_refusal_says_the_field_why_and_the_fix() {
    let found = refused(&init(", runAsUser: 0"), false);
    assert_eq!(
        found[0].to_string(),
        "spec.initContainers[name=certs].securityContext.runAsUser: Pod Security \"restricted\" refuses it: 0 runs as root; remove it, or set allow_privileged = true on the pool"
    );
    let found = refused("spec:\n  containers:\n  - { name: proxy, image: 'proxy:1' }\n", false);
    let text: Vec<String> = found.iter().map(Refusal::to_string).collect();
    assert_eq!(
        text,
        [
            "spec.containers[name=proxy].securityContext.allowPrivilegeEscalation: Pod Security \"restricted\" requires it false: unset, a setuid program could gain root; set it to false, or set allow_privileged = true on the pool",
            "spec.containers[name=proxy].securityContext.capabilities.drop: Pod Security \"restricted\" requires it to hold ALL: without, the container keeps the runtime's default capabilities; set it to [ALL], or set allow_privileged = true on the pool",
        ]
    );
    let found = refused(&pod("  serviceAccountName: deployer"), false);
    assert!(
        found[0].to_string().ends_with(
            "remove it and set service_account on the pool instead, or set allow_privileged = true on the pool"
        ),
        "{}",
        found[0]
    );
    let found = refused("spec:\n  ephemeralContainers:\n  - { name: debug, image: 'busybox:1' }\n", true);
    assert!(found[0].to_string().ends_with("remove it (allow_privileged does not allow it either)"), "{}", found[0]);
}

/// What restricted allows, and what the build pod needs of a template, stays accepted.
#[test]
fn what_restricted_allows_is_not_refused() {
    let accepted = [
        // A restricted sidecar with what restricted still allows it.
        sidecar_with(
            "allowPrivilegeEscalation: false, runAsUser: 1001, runAsNonRoot: true, capabilities: { drop: [ALL], add: [NET_BIND_SERVICE] }, seccompProfile: { type: RuntimeDefault }, seLinuxOptions: { type: container_t, level: 's0:c1,c2' }, procMount: Default, appArmorProfile: { type: RuntimeDefault }",
            ", ports: [{ containerPort: 3128, hostPort: 0 }], lifecycle: { preStop: { exec: { command: [sh] } } }, livenessProbe: { exec: { command: [ok] } }",
        ),
        sidecar(", seccompProfile: { type: Localhost, localhostProfile: builds.json }", ""),
        // Volumes of the kinds restricted allows; another Secret beside the build, not in it.
        mounted(
            PROXY,
            "[{ name: ca, configMap: { name: corporate-ca } }, { name: tmp, emptyDir: {} }, { name: cache, persistentVolumeClaim: { claimName: c } }, { name: info, downwardAPI: { items: [{ path: labels, fieldRef: { fieldPath: metadata.labels } }] } }, { name: vault, csi: { driver: secrets-store.csi.k8s.io } }, { name: scratch, ephemeral: { volumeClaimTemplate: { spec: { accessModes: [ReadWriteOnce] } } } }, { name: mirror-auth, secret: { secretName: mirror-auth } }]",
            "mirror-auth",
        ),
        sidecar(
            "",
            ", env: [{ name: AUTH, valueFrom: { secretKeyRef: { name: mirror-auth, key: token } } }, { name: LD_PRELOAD, value: /x.so }], envFrom: [{ configMapRef: { name: proxy-env } }]",
        ),
        // The build container tuned: resources, env, a CA bundle, an HTTP probe.
        mounted(
            "name: build, resources: { limits: { memory: 8Gi } }, env: [{ name: HTTP_PROXY, value: 'http://localhost:3128' }, { name: C, valueFrom: { configMapKeyRef: { name: c, key: k } } }], livenessProbe: { httpGet: { port: 8080 } }",
            "[{ name: ca, projected: { sources: [{ configMap: { name: corporate-ca } }, { downwardAPI: { items: [{ path: l, fieldRef: { fieldPath: metadata.labels } }] } }] } }]",
            "ca",
        ),
        "spec:\n  initContainers:\n  - { name: source, env: [{ name: GIT_SSL_CAINFO, value: /etc/ssl/ca.pem }] }\n".into(),
        pod(
            "  automountServiceAccountToken: false\n  priorityClassName: batch-low\n  hostNetwork: false\n  shareProcessNamespace: false\n  securityContext: { runAsNonRoot: true, runAsUser: 1000, sysctls: [{ name: net.ipv4.ip_unprivileged_port_start, value: '0' }] }\n  nodeSelector: { pool: builds }",
        ),
        "metadata:\n  annotations: { container.apparmor.security.beta.kubernetes.io/proxy: runtime/default, container.apparmor.security.beta.kubernetes.io/build: localhost/builds, team: x }\n".into(),
    ];
    for yaml in accepted {
        assert_eq!(refused(&yaml, false), [], "{yaml}");
    }
}

#[test]
fn a_kpack_templates_fields_are_refused_alike() {
    // kpack's Build carries serviceAccountName and priorityClassName: the same rules hold there.
    let t = json!({ "spec": { "serviceAccountName": "kpack-admin", "priorityClassName": "system-node-critical", "containers": [{ "name": "anything", "env": [{ "name": "T", "valueFrom": { "secretKeyRef": { "name": "regcred", "key": "k" } } }] }] } });
    let credentials = credentials();
    let found = refusals(&t, &Allowance { privileged: false, credential_secrets: &credentials });
    let fields: Vec<&str> = found.iter().map(|r| r.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.priorityClassName",
            "spec.serviceAccountName",
            "spec.containers[name=anything].env[name=T].valueFrom.secretKeyRef"
        ]
    );
}

#[test]
fn odd_shapes_give_no_refusal_and_no_panic() {
    for value in [
        json!(5),
        json!(null),
        json!({ "spec": 5 }),
        json!({ "metadata": { "annotations": 5 }, "spec": { "containers": 5, "securityContext": 5 } }),
        json!({ "spec": { "containers": [5, { "name": 3, "securityContext": 7, "ports": [5], "env": 5 }], "volumes": [null, 1, { "projected": 5 }], "hostNetwork": "yes" } }),
        json!({ "spec": { "securityContext": { "sysctls": 5, "seLinuxOptions": 5, "runAsUser": "0" } } }),
    ] {
        assert_eq!(refusals(&value, &Allowance::default()), [], "{value}");
    }
}

#[test]
fn a_mount_path_is_under_cnb_as_the_kernel_resolves_it() {
    for path in ["/cnb", "/cnb/", "//cnb/lifecycle", "/./cnb/buildpacks", "/layers/../cnb", "/../cnb/x"] {
        assert!(under_cnb(path), "{path}");
    }
    for path in ["/cnbx", "/workspace/cnb", "/etc/ssl/certs", "/", "", "/cnb/../etc"] {
        assert!(!under_cnb(path), "{path}");
    }
}

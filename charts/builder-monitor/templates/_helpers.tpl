{{/* The release's full name, cut to the 63 characters object names allow. */}}
{{- define "builder-monitor.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "builder-monitor.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "builder-monitor.labels" -}}
{{ include "builder-monitor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "builder-monitor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "builder-monitor.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The data directory: the SQLite ledger's, BUILDER_MONITOR_STATE_DIR in the pod. */}}
{{- define "builder-monitor.dataDir" -}}
/var/lib/builder-monitor
{{- end -}}

{{/* Replicas: `replicaCount` with leader election, else 1. */}}
{{- define "builder-monitor.replicas" -}}
{{- ternary (int .Values.replicaCount) 1 .Values.features.leaderElection -}}
{{- end -}}

{{/*
The init container's `builder-monitor check` arguments: one `--expect KEY=VALUE@NAME` per value the
chart shaped the release by, NAME being that value's, so a config that disagrees stops the pod
naming both fixes: the config key, and the Helm value (or the release namespace).
*/}}
{{- define "builder-monitor.checkArgs" -}}
{{- $f := .Values.features -}}
{{- $args := list "check" "--config" "/etc/builder-monitor/config.toml" -}}
{{- $pools := list -}}
{{- range .Values.pools -}}
{{- $pools = append $pools .name -}}
{{- end -}}
{{- $expect := list
  (printf "listen-port=%d@features.port" (int $f.port))
  (printf "namespace=%s@--namespace" .Release.Namespace)
  "in-cluster=true@serviceAccount"
  (printf "publish=%t@features.publish" $f.publish)
  (printf "prune=%t@features.prune" (and $f.publish $f.prune))
  (printf "leader-election=%t@features.leaderElection" $f.leaderElection)
  (printf "state=%s@features.clusterState" (ternary "kubernetes" (include "builder-monitor.dataDir" .) $f.clusterState))
  (printf "runner=%s@features.runner.type" $f.runner.type)
  (printf "runner-namespace=%s@features.runner.namespace" $f.runner.namespace)
  (printf "deploy-namespaces=%s@deployNamespaces" (join "," .Values.deployNamespaces))
  (printf "pools=%s@pools" (join "," $pools)) -}}
{{- range $expect -}}
{{- $args = append (append $args "--expect") . -}}
{{- end -}}
{{- toYaml $args -}}
{{- end -}}

{{/* Where pool NAME's kubeconfig is mounted: the directory; the file is `kubeconfig` in it. */}}
{{- define "builder-monitor.poolDir" -}}
/etc/builder-monitor/pools/{{ . }}
{{- end -}}

{{/* The ConfigMap of `podTemplates`, mounted at /etc/builder-monitor/templates. */}}
{{- define "builder-monitor.podTemplatesName" -}}
{{- printf "%s-pod-templates" (include "builder-monitor.fullname" .) -}}
{{- end -}}

{{/* Both containers' mount of `podTemplates`: `check` reads the templates when it loads the config. */}}
{{- define "builder-monitor.podTemplatesMount" -}}
{{- if .Values.podTemplates -}}
- name: pod-templates
  mountPath: /etc/builder-monitor/templates
  readOnly: true
{{- end -}}
{{- end -}}

{{/* The environment of both containers: the pod's identity, the data directory, secrets by reference. */}}
{{- define "builder-monitor.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: BUILDER_MONITOR_STATE_DIR
  value: {{ include "builder-monitor.dataDir" . }}
{{- with .Values.signing }}
{{- if and .existingSecret .passwordKey }}
- name: {{ include "builder-monitor.signingPasswordEnv" $ }}
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .passwordKey | quote }}
{{- end }}
{{- end }}
{{- range .Values.secretEnv }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .key }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The pod's affinity: `affinity` as given, plus, with more than one replica and no podAntiAffinity of
the user's, one by `podAntiAffinityPreset` on the release's selector labels per node, so a node's
loss cannot take every replica (the PodDisruptionBudget guards only voluntary evictions).
*/}}
{{- define "builder-monitor.affinity" -}}
{{- $v := .top.Values -}}
{{- $affinity := deepCopy ($v.affinity | default dict) -}}
{{- $preset := $v.podAntiAffinityPreset | default "soft" -}}
{{- if and (gt .replicas 1) (ne $preset "none") (not (hasKey $affinity "podAntiAffinity")) -}}
{{- $term := dict "labelSelector" (dict "matchLabels" (include "builder-monitor.selectorLabels" .top | fromYaml)) "topologyKey" "kubernetes.io/hostname" -}}
{{- if eq $preset "hard" -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- else -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) -}}
{{- end -}}
{{- end -}}
{{- with $affinity -}}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* Refuses values the chart cannot run, saying what to change (the config itself is checked in the pod). */}}
{{- define "builder-monitor.validate" -}}
{{- $f := .Values.features -}}
{{- $replicas := include "builder-monitor.replicas" . | int -}}
{{- if and (gt $replicas 1) (not $f.clusterState) -}}
{{- fail (printf "replicaCount: %d with a SQLite ledger: each replica would keep its own. Set replicaCount: 1, or keep the ledger in the cluster: [monitor] state = \"kubernetes\" in config and features.clusterState: true" $replicas) -}}
{{- end -}}
{{- if and (gt $replicas 1) .Values.persistence.enabled -}}
{{- fail (printf "persistence.enabled with replicaCount: %d: the claim holds one replica's SQLite ledger. Set replicaCount: 1, or persistence.enabled: false (with features.clusterState the ledger is in the cluster)" $replicas) -}}
{{- end -}}
{{- $runnerTypes := list -}}
{{- range (.Files.Get "runners.yaml" | fromYaml).runners -}}
{{- $runnerTypes = append $runnerTypes .type -}}
{{- end -}}
{{- if not (has $f.runner.type $runnerTypes) -}}
{{- fail (printf "features.runner.type = %q is not one of %s (the config's [runner] type)" $f.runner.type (join ", " $runnerTypes)) -}}
{{- end -}}
{{- $pools := list -}}
{{- range .Values.pools -}}
{{- if has .name $pools -}}
{{- fail (printf "pools: %q is listed twice (one entry per kubeconfig; pools of one cluster may share it)" .name) -}}
{{- end -}}
{{- $pools = append $pools .name -}}
{{- end -}}
{{- $s := .Values.signing -}}
{{- if and (eq (toString $s.requireSigned) "true") (not (include "builder-monitor.signing" .)) -}}
{{- fail "signing.requireSigned: true trusts no key: set signing.existingSecret (our own key) or list the keys to trust in signing.trustedKeys" -}}
{{- end -}}
{{- $trusted := list -}}
{{- range $s.trustedKeys -}}
{{- if has .name $trusted -}}
{{- fail (printf "signing.trustedKeys: %q is listed twice (each is the file trusted/NAME.pub)" .name) -}}
{{- end -}}
{{- $trusted = append $trusted .name -}}
{{- end -}}
{{- if and (include "builder-monitor.signing" .) (not .Values.podSecurityContext.fsGroup) -}}
{{- fail "signing: the keys are mounted with modes 0400 and 0440, readable by the container only through the pod's fsGroup: set podSecurityContext.fsGroup (65532 by default)" -}}
{{- end -}}
{{- if and $pools (not .Values.podSecurityContext.fsGroup) -}}
{{- fail "pools: the kubeconfigs are mounted with mode 0400, readable by the container only through the pod's fsGroup: set podSecurityContext.fsGroup (65532 by default)" -}}
{{- end -}}
{{- end -}}

{{/* Where the `signing` keys are mounted (one projected volume, read-only, in both containers). */}}
{{- define "builder-monitor.signingDir" -}}
/etc/builder-monitor/signing
{{- end -}}

{{/* The variable holding the signing key's password, from signing.existingSecret's passwordKey. */}}
{{- define "builder-monitor.signingPasswordEnv" -}}
BUILDER_MONITOR_SIGNING_PASSWORD
{{- end -}}

{{/* Whether the chart writes [signing]: it has a key to sign with or keys to trust. */}}
{{- define "builder-monitor.signing" -}}
{{- if or .Values.signing.existingSecret .Values.signing.trustedKeys -}}true{{- end -}}
{{- end -}}

{{/*
The [signing] table the chart appends to `config` from the `signing` values: paths into the
mounted keys and the password's variable name, never a secret. Booleans: absent (null) is the
config's default.
*/}}
{{- define "builder-monitor.signingConfig" -}}
{{- $s := .Values.signing -}}
{{- if include "builder-monitor.signing" . -}}
{{- $dir := include "builder-monitor.signingDir" . -}}
{{- $trusted := list -}}
# Written by the chart from its `signing` values (a duplicate key here: leave [signing] out of `config`).
[signing]
{{- if $s.existingSecret }}
key = {{ printf "%s/cosign.key" $dir | quote }}
{{- if $s.passwordKey }}
password_env = {{ include "builder-monitor.signingPasswordEnv" . | quote }}
{{- end }}
attest = {{ ne (toString $s.attest) "false" }}
builds = {{ eq (toString $s.builds) "true" }}
{{- if $s.publicKeyKey }}
{{- $trusted = append $trusted (printf "%s/cosign.pub" $dir) }}
{{- end }}
{{- end }}
require_signed = {{ eq (toString $s.requireSigned) "true" }}
{{- range $s.trustedKeys }}
{{- $trusted = append $trusted (printf "%s/trusted/%s.pub" $dir .name) }}
{{- end }}
trusted_keys = [{{ range $i, $path := $trusted }}{{ if $i }}, {{ end }}{{ $path | quote }}{{ end }}]
{{- end -}}
{{- end -}}

{{/* The config file's text: `config`, and the [signing] table when the chart writes one. */}}
{{- define "builder-monitor.configText" -}}
{{- .Values.config -}}
{{- with include "builder-monitor.signingConfig" . }}
{{- if not (hasSuffix "\n" $.Values.config) }}
{{ end }}
{{ . }}
{{ end -}}
{{- end -}}

{{/* Both containers' mount of the signing keys: `check` decrypts the key and reads the trusted ones. */}}
{{- define "builder-monitor.signingMount" -}}
{{- if include "builder-monitor.signing" . -}}
- name: signing
  mountPath: {{ include "builder-monitor.signingDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}

{{/*
The signing keys as one projected volume: from signing.existingSecret only cosign.key (0400) and
the public key (0440), never the password (a variable); each trusted key as trusted/NAME.pub. The
kubelet lets the pod's fsGroup read them too.
*/}}
{{- define "builder-monitor.signingVolume" -}}
{{- $s := .Values.signing -}}
{{- if include "builder-monitor.signing" . -}}
- name: signing
  projected:
    defaultMode: 288
    sources:
      {{- if $s.existingSecret }}
      - secret:
          name: {{ $s.existingSecret }}
          items:
            - key: cosign.key
              path: cosign.key
              mode: 256
            {{- if $s.publicKeyKey }}
            - key: {{ $s.publicKeyKey | quote }}
              path: cosign.pub
            {{- end }}
      {{- end }}
      {{- range $s.trustedKeys }}
      - {{ ternary "secret" "configMap" (hasKey . "secret") }}:
          name: {{ .secret | default .configMap }}
          items:
            - key: {{ .key | default "cosign.pub" | quote }}
              path: trusted/{{ .name }}.pub
      {{- end }}
{{- end -}}
{{- end -}}

//! `check --online`: what the config names, asked whether it is there before `run` depends on it —
//! one HEAD per builder watch, per run image watch its builder's metadata names and per app image
//! tag (the daemon's registry client and credentials); per Kubernetes cluster the daemon would use,
//! its version and then the daemon's start-up access check (SelfSubjectAccessReviews); one `git
//! ls-remote` per `[[gitops]]` target (the daemon's Git settings); one `HEAD /` per alert
//! receiver's origin and one `HEAD` of an OSV download URL (`probes`); per app image registry,
//! whether it serves the OCI 1.1 referrers API (one GET, the first app image's digest). All at once, each bounded by one
//! timeout, so a hung host costs one timeout, not one per entry.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use builder_monitor::cluster::{self, ClusterError, Permission};
use builder_monitor::config::{Config, GitopsTarget, KubernetesSettings, run_image_watch};
use builder_monitor::inspect;
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::{Registry, RegistryError};
use builder_monitor::runner::git::Repo;
use builder_monitor_core::reference::ImageRef;

mod probes;

/// What one entry's check found.
#[derive(Debug)]
pub enum Finding {
    /// It is there: the entry and what was seen.
    Ok(String),
    /// Not a failure, but worth saying (an app tag not pushed yet).
    Note(String),
    /// `run` would fail on it: the entry, what went wrong and the fix, one line.
    Failed(String),
}

type Check<'a> = Pin<Box<dyn Future<Output = Vec<Finding>> + Send + 'a>>;

/// Every check of `config`, at once, each within `within`; their findings in config order.
pub async fn run(config: &Config, within: Duration) -> Vec<Finding> {
    let registry = Registry::new(config.registries.values().cloned(), Metrics::new());
    let registry = &registry;
    let mut checks: Vec<(String, Check<'_>)> = Vec::new();
    for b in &config.builders {
        checks.push((format!("watch \"{}\": {}", b.name, b.image), Box::pin(builder(registry, config, b))));
    }
    for i in &config.images {
        let entry = format!("image \"{}\": {}", i.name, i.image);
        checks.push((entry.clone(), Box::pin(app_image(registry, entry, &i.image))));
    }
    for (entry, settings, permissions) in clusters(config) {
        checks.push((entry.clone(), Box::pin(cluster_access(entry, settings, permissions))));
    }
    for (n, target) in config.gitops.iter().enumerate() {
        let entry = format!("gitops \"{}\": {}", target.name, target.repo);
        checks.push((entry.clone(), Box::pin(gitops(entry, target, n, within))));
    }
    for alert in &config.alerts {
        let entry = format!("alert \"{}\" ({})", alert.name, alert.kind.as_str());
        checks.push((entry.clone(), Box::pin(probes::alert_receiver(entry, alert, within))));
    }
    if let Some(builder_monitor::config::OsvSource::Url(url)) = config.vulnerabilities.as_ref().map(|v| &v.osv) {
        let entry = "[vulnerabilities] osv".to_string();
        checks.push((entry.clone(), Box::pin(probes::osv_url(entry, url, within))));
    }
    let bounded = checks.into_iter().map(|(entry, check)| async move {
        match tokio::time::timeout(within, check).await {
            Ok(findings) => findings,
            Err(_) => vec![Finding::Failed(format!(
                "{entry}: no answer within {} — check that the host is reachable from here and answers (or allow more with --timeout)",
                humantime::format_duration(within)
            ))],
        }
    });
    let mut findings: Vec<Finding> = futures::future::join_all(bounded).await.into_iter().flatten().collect();
    findings.extend(referrers_answers(registry, config));
    findings
}

/// Per registry of the app images, whether it serves the OCI 1.1 referrers API, as the app
/// images' checks found (`null`: not asked, as when no tag was there to ask about): where it does
/// not, signature and attestation bundles are listed under the referrers tag schema's
/// `sha256-<hex>` index.
fn referrers_answers(registry: &Registry, config: &Config) -> Vec<Finding> {
    let mut hosts: Vec<&str> = config.images.iter().map(|i| i.image.registry()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let answer = |host: &str| registry.referrers_api(host).map_or_else(|| "null".to_string(), |a| a.to_string());
    hosts.into_iter().map(|host| Finding::Ok(format!("registry {host}: referrers: {}", answer(host)))).collect()
}

/// A builder's tag, then (when it watches it) the run image its metadata names.
async fn builder(registry: &Registry, config: &Config, b: &builder_monitor::config::BuilderSettings) -> Vec<Finding> {
    let entry = format!("watch \"{}\": {}", b.name, b.image);
    let head = match registry.head_manifest(&b.image).await {
        Ok(head) => head,
        Err(error) => return vec![Finding::Failed(registry_failure(&entry, &error))],
    };
    let mut out = vec![Finding::Ok(format!("{entry}: {}", head.digest))];
    // Read as a check reads it: the platforms, and the metadata that names the run image watch.
    let metadata = async {
        let observation = inspect::observe(registry, &b.image, &head.digest, config.monitor.max_platforms).await?;
        if let Some(unmatched) = unmatched_platforms(b, &observation) {
            return Ok(Err(unmatched));
        }
        inspect::builder_metadata(registry, &b.image, &observation, b.platforms.as_deref()).await.map(Ok)
    };
    let metadata = match metadata.await {
        Ok(Ok(metadata)) => metadata,
        Ok(Err(unmatched)) => {
            out.push(Finding::Failed(format!("{entry}: {unmatched}")));
            return out;
        }
        Err(error) if b.watch_run_image => {
            out.push(Finding::Failed(format!(
                "{entry}: cannot read its metadata for the run image watch: {error} — check that the tag is a CNB builder, or set watch_run_image = false"
            )));
            return out;
        }
        Err(_) => return out,
    };
    if metadata.preferred().is_none() {
        out.push(Finding::Note(format!(
            "{entry}: no CNB builder metadata (io.buildpacks.builder.metadata): this looks like an app image or another \
             image, not a builder — an app image goes in [[images]], with the builder it is built with"
        )));
    }
    if !b.watch_run_image {
        return out;
    }
    let run_image = match run_image_watch(b, Some(&metadata)) {
        Ok(Some(run_image)) => run_image,
        Ok(None) => return out,
        Err((name, error)) => {
            out.push(Finding::Failed(format!(
                "run image watch of \"{}\": \"{name}\" (its metadata's run image) is not a reference: {error} — set watch_run_image = false",
                b.name
            )));
            return out;
        }
    };
    let entry = format!("run image watch of \"{}\": {run_image}", b.name);
    out.push(match registry.head_manifest(&run_image).await {
        Ok(head) => Finding::Ok(format!("{entry}: {}", head.digest)),
        Err(error) => Finding::Failed(registry_failure(&entry, &error)),
    });
    out
}

/// Why `platforms` keeps none of the builder's platforms (every move would be muted), naming them.
fn unmatched_platforms(
    b: &builder_monitor::config::BuilderSettings,
    observation: &inspect::Observation,
) -> Option<String> {
    let filter = b.platforms.as_deref()?;
    if !observation.selected(Some(filter)).is_empty() {
        return None;
    }
    let mut theirs: Vec<&str> = observation.platforms.keys().map(|k| k.split('#').next().unwrap_or(k)).collect();
    theirs.dedup();
    let ours: Vec<String> = filter.iter().map(ToString::to_string).collect();
    Some(format!(
        "platforms = [{}] matches none of the builder's platforms ({}), so no move would ever be seen — name some of those",
        ours.join(", "),
        theirs.join(", ")
    ))
}

/// An app image's tag. One that is not there yet is a note: the first build pushes it.
async fn app_image(registry: &Registry, entry: String, image: &ImageRef) -> Vec<Finding> {
    vec![match registry.head_manifest(image).await {
        Ok(head) => {
            // What signing will use there (asked once per registry, remembered); a registry that
            // cannot say is shown as not asked.
            let _ = registry.has_referrers_api(image, &head.digest).await;
            Finding::Ok(format!("{entry}: {}", head.digest))
        }
        Err(RegistryError::NotFound { .. }) => Finding::Note(format!(
            "{entry}: no such tag yet — fine before its first build (a rebuild pushes it); a rebase needs it there"
        )),
        Err(error) => Finding::Failed(registry_failure(&entry, &error)),
    }]
}

/// One line for a registry's answer: what it said and what to change.
fn registry_failure(entry: &str, error: &RegistryError) -> String {
    let fix = match error {
        RegistryError::NotFound { .. } => return format!("{entry}: tag not found (manifest unknown) — check the tag"),
        RegistryError::Unauthorized { registry, .. } => {
            format!("check the credentials for {registry} (docker login, or [registries.\"{registry}\"] credentials)")
        }
        RegistryError::RateLimited { .. } => "try again later, or give the registry credentials".to_string(),
        RegistryError::Unavailable { registry, .. } => {
            format!("check the host and port of {registry}, and that the registry runs and is reachable from here")
        }
        RegistryError::InvalidResponse { registry, .. } => format!("check that {registry} is a container registry"),
        RegistryError::Setup { registry, .. } => format!("check [registries.\"{registry}\"]"),
        RegistryError::Rejected { .. } => "check the registry's settings".to_string(),
    };
    format!("{entry}: {error} — {fix}")
}

/// The clusters the daemon would use, by how messages name them, with what it needs there:
/// `[kubernetes]`'s when anything needs it, each pool's own.
fn clusters(config: &Config) -> Vec<(String, KubernetesSettings, Vec<Permission>)> {
    let mut out = Vec::new();
    if !cluster::only_actions_need_it(config) || !cluster::action_users(config).is_empty() {
        let needed = cluster::required_permissions(config);
        out.push(("cluster of [kubernetes]".to_string(), config.kubernetes.clone(), needed));
    }
    if config.runner.in_force().iter().any(|b| b.pools) {
        for pool in &config.runner.pools {
            let Some(own) = &pool.cluster else { continue };
            let needed = cluster::pool_permissions(pool);
            out.push((format!("cluster of pool \"{}\"", pool.name), own.settings(), needed));
        }
    }
    out
}

/// The API server's version (does it answer, does it take the credentials), then the daemon's
/// start-up check: every permission the config needs there, asked with SelfSubjectAccessReviews
/// (never by trying a write), and each namespace named, where the account may read it.
async fn cluster_access(entry: String, settings: KubernetesSettings, needed: Vec<Permission>) -> Vec<Finding> {
    let client = match cluster::client(&settings).await {
        Ok(client) => client,
        Err(error) => return vec![Finding::Failed(format!("{entry}: {error} — {}", cluster::CONFIGURE))],
    };
    // Any HTTP answer but a refusal of the credentials will do: the version is only reported.
    let version = match client.apiserver_version().await {
        Ok(version) => format!(" (Kubernetes {}.{})", version.major, version.minor),
        Err(kube::Error::Api(status)) if status.code != 401 => String::new(),
        Err(error) => return vec![Finding::Failed(cluster_failure(&entry, &error))],
    };
    vec![match cluster::check_access(&client, &needed).await {
        Ok(()) if needed.is_empty() => Finding::Ok(format!("{entry}: answers{version}")),
        Ok(()) => Finding::Ok(format!("{entry}: answers{version}; every permission the config needs is granted")),
        Err(ClusterError::Api(error)) => Finding::Failed(cluster_failure(&entry, &error)),
        // Missing permissions and namespaces name their fix already.
        Err(error) => Finding::Failed(format!("{entry}: {error}")),
    }]
}

/// One line for a cluster's refusal or silence: what it said and what to change.
fn cluster_failure(entry: &str, error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 401 => format!(
            "{entry}: the cluster refused the kubeconfig's credentials (HTTP 401) — renew them in the kubeconfig (an expired or revoked token, or one of another cluster)"
        ),
        kube::Error::Api(status) if status.code == 403 => format!(
            "{entry}: the cluster refused the account even a permission review (HTTP 403: {}) — bind the account as `builder-monitor rbac` prints",
            status.message
        ),
        _ if untrusted_certificate(error) => format!(
            "{entry}: the server's certificate is not signed by the kubeconfig's CA — set the cluster's CA in the kubeconfig (certificate-authority-data), or check its server address"
        ),
        _ if builder_monitor::config::unanswered(error) => format!(
            "{entry}: does not answer: {error} — check the kubeconfig's server address and that the cluster runs"
        ),
        _ => format!("{entry}: {error} — check the kubeconfig's server address"),
    }
}

/// Whether TLS failed on the server's certificate (the kubeconfig trusts another CA).
fn untrusted_certificate(error: &kube::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if matches!(e.downcast_ref::<rustls::Error>(), Some(rustls::Error::InvalidCertificate(_))) {
            return true;
        }
        // An I/O error's `source()` skips the error it wraps (the TLS error, here nested twice).
        cause = match e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    false
}

/// One `git ls-remote` of the target's branches, as the daemon's Git commands run.
async fn gitops(entry: String, target: &GitopsTarget, n: usize, within: Duration) -> Vec<Finding> {
    // ls-remote needs no clone; git only wants a directory to run in (and ssh one for its
    // known hosts), removed after.
    let dir = std::env::temp_dir().join(format!("builder-monitor-check-{}-{n}", std::process::id()));
    if let Err(error) = std::fs::create_dir_all(&dir) {
        return vec![Finding::Failed(format!("{entry}: cannot create {}: {error}", dir.display()))];
    }
    let repo = Repo::new(dir.clone(), target).with_timeout(within);
    let mut branches = vec![target.branch.as_str()];
    if target.push_branch != target.branch {
        branches.push(target.push_branch.as_str());
    }
    let listed = repo.ls_remote(&branches).await;
    let _ = std::fs::remove_dir_all(&dir);
    vec![match listed {
        Ok(found) if found.iter().any(|b| branches.contains(&b.as_str())) => {
            Finding::Ok(format!("{entry}: {} there", found.join(", ")))
        }
        Ok(_) => Finding::Failed(format!(
            "{entry}: no branch {} — check branch (and push_branch), or push the branch first",
            branches.join(" nor ")
        )),
        Err(error) => Finding::Failed(format!("{entry}: {error} — check repo and its credentials")),
    }]
}

//! `[[images]]`: the app images built from watched builders, how each reacts to a move, where it
//! builds and the workloads its new digest is deployed to.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::runner::{PodTemplate, RunnerKind};
use super::{BuilderSettings, Validator};
use builder_monitor_core::reference::ImageRef;

use builder_monitor_core::deploy::{GitopsOwned, Undo, Workload, WorkloadKind};
use builder_monitor_core::plan::{ActionKind, PlannedImage};
pub use builder_monitor_core::plan::{Policy, Scheduling, Source, Toleration};
use builder_monitor_core::rollout::Rollout;

#[derive(Debug, Clone, PartialEq)]
pub struct ImageSettings {
    pub name: String,
    /// The `[[builders]]` name it is built with.
    pub builder: String,
    /// The app image tag.
    pub image: ImageRef,
    pub source: Option<Source>,
    /// Build-time environment.
    pub env: BTreeMap<String, String>,
    pub policy: Policy,
    pub scheduling: Scheduling,
    /// Roll-out order within a change: wave N starts once every lower wave has succeeded.
    pub wave: u32,
    /// Its actions wait for a person's approval, whatever their kind.
    pub approve: bool,
    /// The workloads its new digest is deployed to (none: it is not deployed).
    pub deploy: Vec<Workload>,
    /// What a failed deploy puts back; `None`: `[rollout] undo`.
    pub undo: Option<Undo>,
    /// The `[[runner.pools]]` entry it builds in; `None`: the first pool serving its platform.
    pub pool: Option<String>,
    /// Merged into its build pod over its pool's.
    pub pod_template: Option<PodTemplate>,
    /// Its own `require_signed`; `None`: `[signing] require_signed`.
    pub require_signed: Option<bool>,
}

/// The wave of an `[[images]]` entry without one; 0 is left for canaries.
pub const DEFAULT_WAVE: u32 = 1;

impl ImageSettings {
    /// Whether an action of `kind` for this image waits for approval.
    pub fn needs_approval(&self, kind: ActionKind, rollout: &Rollout) -> bool {
        self.approve || rollout.approve.contains(&kind)
    }

    /// What a failed deploy of this image puts back: its own `undo`, else `[rollout] undo`.
    pub fn undo(&self, rollout: &Rollout) -> Undo {
        self.undo.unwrap_or(rollout.undo)
    }
}

impl PlannedImage for ImageSettings {
    fn name(&self) -> &str {
        &self.name
    }
    fn builder(&self) -> &str {
        &self.builder
    }
    fn policy(&self) -> Policy {
        self.policy
    }
}

/// Longest CronJob name: its Jobs' names add 11 characters and must stay a 63-character label.
const CRONJOB_NAME_MAX: usize = 52;
/// Longest object name (a DNS-1123 subdomain).
const SUBDOMAIN_MAX: usize = 253;

/// The rule a namespace or container name breaks, for its message.
const LABEL: &str =
    "a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit";
/// The rule a workload name breaks.
const SUBDOMAIN: &str = "a DNS-1123 subdomain: at most 253 characters, lowercase letters, digits and '-' in parts joined by '.', each starting and ending with a letter or digit";

/// The message for an `undo` value that is none of the three.
pub(super) fn unknown_undo(value: &str) -> String {
    format!("unknown undo \"{value}\", expected workload-and-tag, workload or none")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawImage {
    name: Spanned<String>,
    builder: Spanned<String>,
    image: Spanned<String>,
    source: Option<Spanned<Source>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    policy: Option<Spanned<String>>,
    scheduling: Option<Spanned<Scheduling>>,
    wave: Option<Spanned<i64>>,
    approve: Option<bool>,
    deploy: Option<Vec<Spanned<RawWorkload>>>,
    undo: Option<Spanned<String>>,
    pool: Option<Spanned<String>>,
    pod_template: Option<Spanned<String>>,
    require_signed: Option<Spanned<bool>>,
}

/// One `deploy = [{ … }]` entry, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    kind: Spanned<String>,
    namespace: Spanned<String>,
    name: Spanned<String>,
    container: Option<Spanned<String>>,
    gitops_owned: Option<Spanned<String>>,
}

/// The workloads deployed to so far, by (kind, namespace, name): each image that names it, the
/// container it names, and where in the text.
pub(super) type Deployed = BTreeMap<(WorkloadKind, String, String), Vec<(String, Option<String>, usize)>>;

/// Whether `name` is a DNS-1123 subdomain of at most `max` characters: dot-separated labels of
/// lowercase letters, digits and `-`, each starting and ending with a letter or digit.
fn is_dns_subdomain(name: &str, max: usize) -> bool {
    name.len() <= max
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

impl<'a> Validator<'a> {
    pub(super) fn images(
        &mut self,
        elements: super::Elements<'a>,
        builders: Option<&[BuilderSettings]>,
    ) -> Result<Option<Vec<ImageSettings>>, super::NotAlone> {
        let mut names = super::Names::default();
        let mut deployed = Deployed::default();
        let mut out = Vec::new();
        let ok = self.each_element(elements, "images", |v, raw: RawImage| {
            let unique = v.unique_name(&mut names, &raw.name, "image");
            match v.image(raw, builders, &mut deployed) {
                Some(i) => out.push(i),
                None => return false,
            }
            unique
        })?;
        out.shrink_to_fit();
        Ok(ok.then_some(out))
    }

    fn image(
        &mut self,
        raw: RawImage,
        builders: Option<&[BuilderSettings]>,
        deployed: &mut Deployed,
    ) -> Option<ImageSettings> {
        let errors_before = self.diagnostics.len();
        if let Some(builders) = builders
            && !builders.iter().any(|b| &b.name == raw.builder.get_ref())
        {
            let known: Vec<&str> = builders.iter().map(|b| b.name.as_str()).collect();
            self.error(
                raw.builder.span(),
                format!("unknown builder \"{}\" (configured: {})", raw.builder.get_ref(), known.join(", ")),
            );
        }
        let image = match ImageRef::parse(raw.image.get_ref()) {
            Ok(image) if image.digest().is_some() => {
                self.error(raw.image.span(), "an app image is a tag the runner pushes to, not a digest");
                None
            }
            Ok(image) => Some(image),
            Err(err) => {
                self.error(raw.image.span(), format!("invalid image reference \"{}\": {err}", raw.image.get_ref()));
                None
            }
        };
        let policy = match raw.policy.as_ref().map(|p| (p.get_ref().as_str(), p.span())) {
            None | Some(("auto", _)) => Some(Policy::Auto),
            Some(("rebuild", _)) => Some(Policy::Rebuild),
            Some(("rebase", _)) => Some(Policy::Rebase),
            Some(("notify", _)) => Some(Policy::Notify),
            Some((other, span)) => {
                self.error(span, format!("unknown policy \"{other}\", expected auto, rebuild, rebase or notify"));
                None
            }
        };
        if let Some(source) = &raw.source
            && source.get_ref().git.trim().is_empty()
        {
            self.error(source.span(), "source.git must name a repository");
        }
        if let Some(s) = &raw.scheduling {
            if let Some(affinity) = &s.get_ref().affinity {
                self.affinity(&Spanned::new(s.span(), affinity.clone()));
            }
            let kpack = self.pools.iter().any(|p| p.kind == RunnerKind::Kpack);
            if kpack && s.get_ref().node_selector.contains_key("kubernetes.io/os") {
                self.error(s.span(), "kpack rejects a nodeSelector with kubernetes.io/os (it sets the os itself)");
            }
        }
        let wave = match &raw.wave {
            None => DEFAULT_WAVE,
            Some(w) => u32::try_from(*w.get_ref()).unwrap_or_else(|_| {
                self.error(w.span(), format!("wave must be between 0 and {}", u32::MAX));
                DEFAULT_WAVE
            }),
        };
        let deploy = self.workloads(raw.deploy.as_deref().unwrap_or_default(), raw.name.get_ref(), deployed);
        let undo = raw.undo.as_ref().and_then(|u| {
            let undo = Undo::parse(u.get_ref());
            if undo.is_none() {
                self.error(u.span(), unknown_undo(u.get_ref()));
            }
            undo
        });
        let pool = self.image_pool(&raw);
        let pod_template = raw.pod_template.as_ref().and_then(|t| {
            // Privileged fields only through a pool that allows them; kpack's limits wherever the
            // image may build.
            let named = raw.pool.as_ref().and_then(|p| self.pools.iter().find(|s| &s.name == p.get_ref()));
            let allow = named.is_some_and(|p| p.allow_privileged);
            let kpack = match named {
                Some(p) => p.kind == RunnerKind::Kpack,
                None => self.pools.iter().any(|p| p.kind == RunnerKind::Kpack),
            };
            // The registry credentials of every pool the image may build in.
            let credentials: Vec<String> = match named {
                Some(p) => p.credential_secrets.clone(),
                None => self.pools.iter().flat_map(|p| p.credential_secrets.iter().cloned()).collect(),
            };
            self.pod_template(t, kpack, allow, &credentials)
        });
        if let Some(flag) = raw.require_signed.as_ref().filter(|f| *f.get_ref()) {
            // Whether `[signing]` trusts a key is known once it is read.
            self.signed_images.push(self.offset + flag.span().start);
        }
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(ImageSettings {
            name: raw.name.into_inner(),
            builder: raw.builder.into_inner(),
            image: image?,
            source: raw.source.map(Spanned::into_inner),
            env: raw.env,
            policy: policy?,
            scheduling: raw.scheduling.map(Spanned::into_inner).unwrap_or_default(),
            wave,
            approve: raw.approve.unwrap_or(false),
            deploy,
            undo,
            pool,
            pod_template,
            require_signed: raw.require_signed.map(Spanned::into_inner),
        })
    }

    /// An image's `pool`, which must name a configured one.
    fn image_pool(&mut self, raw: &RawImage) -> Option<String> {
        let pool = raw.pool.as_ref()?;
        if self.pools.iter().any(|p| &p.name == pool.get_ref()) {
            return Some(pool.get_ref().clone());
        }
        let message = if self.pools.is_empty() {
            format!(
                "pool \"{}\": no pools are configured ([[runner.pools]] with [runner] type = \"kubernetes\" or \"kpack\")",
                pool.get_ref()
            )
        } else {
            let known: Vec<&str> = self.pools.iter().map(|p| p.name.as_str()).collect();
            format!("unknown pool \"{}\" (configured: {})", pool.get_ref(), known.join(", "))
        };
        self.error(pool.span(), message);
        None
    }

    /// An image's `deploy` entries, each checked as Kubernetes would check the object's names, and
    /// against the entries before it in this image and in the images before it (`deployed`).
    fn workloads(&mut self, raw: &[Spanned<RawWorkload>], image: &str, deployed: &mut Deployed) -> Vec<Workload> {
        let mut here = BTreeMap::new();
        let mut out = Vec::new();
        for entry in raw {
            let Some(w) = self.workload(entry.get_ref()) else { continue };
            let key = (w.kind, w.namespace.clone(), w.name.clone());
            let at = self.offset + entry.span().start;
            if let Some(first) = here.get(&key) {
                let (line, _) = super::line_column(self.text, *first);
                let message =
                    format!("{w} is listed twice in this image's deploy (first on line {line}): list it once");
                self.error(entry.span(), message);
                continue;
            }
            here.insert(key.clone(), at);
            let others = deployed.entry(key).or_default();
            // Two images may share a workload only when each names its own container.
            let fights =
                |c: &Option<String>| !matches!((c, &w.container), (Some(theirs), Some(ours)) if theirs != ours);
            let fight = others.iter().find(|(_, c, _)| fights(c)).map(|(other, _, first)| (other.clone(), *first));
            others.push((image.to_string(), w.container.clone(), at));
            if let Some((other, first)) = fight {
                let (line, _) = super::line_column(self.text, first);
                let message = format!(
                    "{w} is also deployed by image \"{other}\" (line {line}): two images would fight over it; \
                     deploy it from one image, or name a different container in each"
                );
                self.error(entry.span(), message);
                continue;
            }
            out.push(w);
        }
        out
    }

    fn workload(&mut self, raw: &RawWorkload) -> Option<Workload> {
        let errors_before = self.diagnostics.len();
        let kind = WorkloadKind::parse(raw.kind.get_ref());
        if kind.is_none() {
            let message = format!(
                "unknown workload kind \"{}\", expected Deployment, StatefulSet, DaemonSet or CronJob",
                raw.kind.get_ref()
            );
            self.error(raw.kind.span(), message);
        }
        let namespace = raw.namespace.get_ref();
        if !super::is_dns_label(namespace) {
            self.error(
                raw.namespace.span(),
                format!("namespace \"{namespace}\" is not a valid namespace name ({LABEL})"),
            );
        }
        let name = raw.name.get_ref();
        if !is_dns_subdomain(name, SUBDOMAIN_MAX) {
            let what = kind.map(WorkloadKind::as_str).unwrap_or("workload");
            self.error(raw.name.span(), format!("name \"{name}\" is not a valid {what} name ({SUBDOMAIN})"));
        } else if kind == Some(WorkloadKind::CronJob) && name.len() > CRONJOB_NAME_MAX {
            let message = format!(
                "CronJob name \"{name}\" is {} characters, at most {CRONJOB_NAME_MAX} (its Jobs' names add 11)",
                name.len()
            );
            self.error(raw.name.span(), message);
        }
        if let Some(c) = &raw.container
            && !super::is_dns_label(c.get_ref())
        {
            self.error(c.span(), format!("container \"{}\" is not a valid container name ({LABEL})", c.get_ref()));
        }
        let gitops_owned = match raw.gitops_owned.as_ref().map(|g| (g.get_ref().as_str(), g.span())) {
            None | Some(("skip", _)) => GitopsOwned::Skip,
            Some(("patch", _)) => GitopsOwned::Patch,
            Some((other, span)) => {
                self.error(span, format!("unknown gitops_owned \"{other}\", expected skip or patch"));
                GitopsOwned::Skip
            }
        };
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(Workload {
            kind: kind?,
            namespace: namespace.clone(),
            name: name.clone(),
            container: raw.container.as_ref().map(|c| c.get_ref().clone()),
            gitops_owned,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_subdomains() {
        for ok in ["a", "petclinic", "web-1.shop", "0.a-b.c", &"a".repeat(253)] {
            assert!(is_dns_subdomain(ok, SUBDOMAIN_MAX), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a..b", ".a", "a.", "a_b", "a.-b", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(bad, SUBDOMAIN_MAX), "{bad}");
        }
    }
}

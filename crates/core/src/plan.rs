//! Planning: what each app image gets when its builder or run image moves (rebase, rebuild or
//! nothing), and how far each app image is from its builder's current pin; the kinds of action
//! and their fixed facts (`kind`). Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::cnb::{BuilderMetadata, Buildpack, Change, ChangeKind, explain};
pub use crate::kind::{ActionKind, KindFacts};
pub use target::{ActionPlan, ActionTarget, BatchedChange, GitopsPlan};

mod target;

/// How an app image reacts when its builder (or the builder's run image) moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Rebase when the move allows it and the app is not on the new run image yet, else rebuild.
    Auto,
    /// Always rebuild.
    Rebuild,
    /// Always rebase.
    Rebase,
    /// Alerts only, no action.
    Notify,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Auto => "auto",
            Policy::Rebuild => "rebuild",
            Policy::Rebase => "rebase",
            Policy::Notify => "notify",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub git: String,
    #[serde(default = "default_revision")]
    pub revision: String,
    #[serde(default)]
    pub sub_path: Option<String>,
}

fn default_revision() -> String {
    "main".to_string()
}

/// A Kubernetes toleration, in the Pod spec's own field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Toleration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// Where the Kubernetes runners place a build pod. Maps merge key by key with `[runner.kubernetes]`;
/// lists and affinity replace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scheduling {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// A Pod spec `affinity` object, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
}

/// An app image as planning sees it (the config's `[[images]]` entries implement it).
pub trait PlannedImage {
    fn name(&self) -> &str;
    /// The `[[builders]]` name it is built with.
    fn builder(&self) -> &str;
    fn policy(&self) -> Policy;
}

impl<T: PlannedImage + ?Sized> PlannedImage for &T {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn builder(&self) -> &str {
        (**self).builder()
    }
    fn policy(&self) -> Policy {
        (**self).policy()
    }
}

/// What is known about an app image in its registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppState {
    /// The tag does not exist yet.
    Missing,
    /// It exists but carries no (readable) CNB lifecycle metadata: it cannot be rebased.
    NotCnb,
    /// It could not be read (registry trouble): assume it is not on the target yet.
    Unreachable(String),
    /// Built by a CNB lifecycle.
    Built {
        run_image_digest: Option<String>,
        buildpacks: Vec<Buildpack>,
        launcher_version: Option<String>,
        /// The app image's own digest.
        digest: Option<String>,
    },
}

/// The run image to rebase onto, and every digest that means "already on it" (the index and the
/// platform manifests: an app records the manifest it was built or rebased on).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunImageTarget {
    pub reference: String,
    pub digests: BTreeSet<String>,
}

/// The move being reacted to.
#[derive(Debug, Clone)]
pub struct Move<'a> {
    pub change: &'a Change,
    /// The builders whose app images the move concerns: the builder itself, or the builders that
    /// use a moved run image.
    pub builders: &'a [String],
    pub run_image: Option<&'a RunImageTarget>,
}

/// What one app image gets, and why, in words for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub image: String,
    pub action: Option<ActionKind>,
    pub why: String,
}

fn short(digest: &str) -> &str {
    let d = digest.rsplit('@').next().unwrap_or(digest);
    &d[..d.len().min("sha256:".len() + 12)]
}

/// One decision per app image built from an affected builder (images of other builders are not
/// listed). At most one action per image: never both a rebase and a rebuild.
pub fn plan<I: PlannedImage>(mv: &Move<'_>, images: &[I], apps: &BTreeMap<String, AppState>) -> Vec<Decision> {
    images
        .iter()
        .filter(|i| mv.builders.iter().any(|b| b == i.builder()))
        .map(|i| {
            let app = apps.get(i.name()).cloned().unwrap_or(AppState::Unreachable("not read".into()));
            let (action, why) = decide(mv, i.policy(), &app);
            Decision { image: i.name().to_string(), action, why }
        })
        .collect()
}

fn decide(mv: &Move<'_>, policy: Policy, app: &AppState) -> (Option<ActionKind>, String) {
    use ActionKind::*;
    let change = mv.change;
    if change.kind == ChangeKind::None {
        return (None, "nothing that affects app images moved".into());
    }
    match policy {
        Policy::Notify => return (None, "policy notify: alerts only".into()),
        Policy::Rebuild => return (Some(Rebuild), format!("policy rebuild ({})", explain(change))),
        Policy::Rebase => {
            return match mv.run_image {
                Some(target) => (Some(Rebase), format!("policy rebase: onto {}", target.reference)),
                None => (None, "policy rebase, but the run image to rebase onto is not known".into()),
            };
        }
        Policy::Auto => {}
    }
    if *app == AppState::Missing {
        return (Some(Rebuild), "the app image does not exist yet".into());
    }
    match change.kind {
        ChangeKind::Rebuild => (Some(Rebuild), explain(change).to_string()),
        ChangeKind::Unknown => {
            (Some(Rebuild), format!("the move could not be classified, rebuilding to be safe ({})", explain(change)))
        }
        ChangeKind::None => (None, "nothing that affects app images moved".into()),
        ChangeKind::Rebase => {
            let Some(target) = mv.run_image else {
                return (Some(Rebuild), "the run image moved but its new reference is not known".into());
            };
            match app {
                AppState::NotCnb => (Some(Rebuild), "not a CNB app image, so it cannot be rebased".into()),
                AppState::Built { run_image_digest: Some(d), .. } if target.digests.contains(d) => {
                    (None, format!("already on the new run image ({})", short(d)))
                }
                AppState::Built { run_image_digest: Some(d), .. } => {
                    (Some(Rebase), format!("on run image {}; rebasing onto {}", short(d), short(&target.reference)))
                }
                AppState::Built { run_image_digest: None, .. } => {
                    (Some(Rebase), format!("run image unrecorded; rebasing onto {}", short(&target.reference)))
                }
                AppState::Unreachable(why) => (
                    Some(Rebase),
                    format!("could not read the app image ({why}); rebasing onto {}", short(&target.reference)),
                ),
                AppState::Missing => unreachable!("handled above"),
            }
        }
    }
}

/// How far an app image is from its builder's current pin (the `plan` command).
///
/// `last_move` is the builder's newest change: a rebuild whose reason is not itself a move (a
/// buildpack the builder does not list) names it, so the reason says what moved. An app built by
/// another lifecycle than the builder's is no reason by itself: the daemon rebases such an app
/// at a run image move (the launcher is the app's own layer), so only a move of the builder's
/// lifecycle is blamed, never a gap that was there before a buildpack moved.
pub fn assess(
    image: &impl PlannedImage,
    app: &AppState,
    builder: Option<&BuilderMetadata>,
    run_image: Option<&RunImageTarget>,
    last_move: Option<&Change>,
) -> Decision {
    let decision = |action, why: String| Decision { image: image.name().to_string(), action, why };
    if image.policy() == Policy::Notify {
        return decision(None, "policy notify: alerts only".into());
    }
    let drift = match app {
        AppState::Missing => Some((ActionKind::Rebuild, "the app image does not exist yet".to_string())),
        AppState::NotCnb => Some((ActionKind::Rebuild, "not a CNB app image".to_string())),
        AppState::Unreachable(why) => return decision(None, format!("cannot read the app image: {why}")),
        AppState::Built { run_image_digest, buildpacks, launcher_version, .. } => {
            let rebuild_move = last_move.filter(|c| matches!(c.kind, ChangeKind::Rebuild | ChangeKind::Unknown));
            let launcher = launcher_version.as_deref().filter(|_| rebuild_move.is_some_and(|c| c.lifecycle.is_some()));
            let rebuild =
                builder.and_then(|b| rebuild_reason(b, buildpacks, launcher)).map(|(why, moved)| match rebuild_move {
                    Some(change) if !moved => format!("the builder moved ({}); {why}", explain(change).moved()),
                    _ => why,
                });
            let rebase = run_image.and_then(|target| match run_image_digest {
                Some(d) if target.digests.contains(d) => None,
                Some(d) => {
                    Some(format!("on run image {}; the run image is now {}", short(d), short(&target.reference)))
                }
                None => Some(format!("run image unrecorded; the run image is now {}", short(&target.reference))),
            });
            match (rebuild, rebase) {
                (Some(why), _) => Some((ActionKind::Rebuild, why)),
                (None, Some(why)) => Some((ActionKind::Rebase, why)),
                (None, None) if builder.is_none() => {
                    return decision(None, "the builder has no recorded CNB metadata yet".into());
                }
                (None, None) => None,
            }
        }
    };
    match (drift, image.policy()) {
        (None, _) => decision(None, "up to date with the builder's pin".into()),
        (Some((_, why)), Policy::Rebuild) => decision(Some(ActionKind::Rebuild), format!("policy rebuild: {why}")),
        (Some((_, why)), Policy::Rebase) if run_image.is_some() => {
            decision(Some(ActionKind::Rebase), format!("policy rebase: {why}"))
        }
        (Some((kind, why)), _) => decision(Some(kind), why),
    }
}

/// Why an app built with these buildpacks and launcher needs a rebuild on this builder, if it does,
/// and whether that reason is a move (a version the builder no longer has).
fn rebuild_reason(
    builder: &BuilderMetadata,
    buildpacks: &[Buildpack],
    launcher: Option<&str>,
) -> Option<(String, bool)> {
    let available: BTreeMap<&str, BTreeSet<&str>> = builder
        .layers
        .iter()
        .map(|(id, versions)| (id.as_str(), versions.keys().map(String::as_str).collect()))
        .chain(builder.buildpacks.iter().map(|b| (b.id.as_str(), b.version.iter().map(String::as_str).collect())))
        .fold(BTreeMap::new(), |mut acc, (id, versions): (&str, BTreeSet<&str>)| {
            acc.entry(id).or_insert_with(BTreeSet::new).extend(versions);
            acc
        });
    // What moved first: a buildpack the builder has at another version, then the lifecycle. A
    // buildpack the builder does not list at all is said last: it is often a composite's part
    // (`node-engine` of `nodejs`) that the builder's labels never named, not what moved.
    let versioned = || buildpacks.iter().filter_map(|bp| bp.version.as_deref().map(|v| (bp.id.as_str(), v)));
    for (id, version) in versioned() {
        if let Some(versions) = available.get(id)
            && !versions.contains(version)
        {
            let now: Vec<&str> = versions.iter().copied().collect();
            return Some((format!("built with {id} {version}; the builder has {}", now.join(", ")), true));
        }
    }
    if let (Some(app), Some(now)) = (launcher, builder.lifecycle.version.as_deref())
        && app != now
    {
        return Some((format!("built with lifecycle {app}; the builder has {now}"), true));
    }
    versioned()
        .find(|(id, _)| !available.contains_key(id))
        .map(|(id, version)| (format!("built with {id} {version}, which the builder does not list"), false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cnb::Reason;

    /// The parts of an `[[images]]` entry planning reads.
    #[derive(Debug, Clone)]
    struct ImageSettings {
        name: String,
        builder: String,
        policy: Policy,
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

    fn image(name: &str, builder: &str, policy: Policy) -> ImageSettings {
        ImageSettings { name: name.into(), builder: builder.into(), policy }
    }

    fn change(kind: ChangeKind) -> Change {
        let mut c = Change::unknown("test");
        c.kind = kind;
        c.note = None;
        c.reasons = match kind {
            ChangeKind::Rebase => vec![Reason::Stack, Reason::RunImage],
            ChangeKind::Rebuild => vec![Reason::Buildpack],
            _ => vec![],
        };
        c
    }

    fn target() -> RunImageTarget {
        RunImageTarget {
            reference: "docker.io/paketobuildpacks/run-jammy-base@sha256:new".into(),
            digests: ["sha256:new".to_string(), "sha256:new-amd64".to_string()].into(),
        }
    }

    fn built(run: &str) -> AppState {
        AppState::Built { run_image_digest: Some(run.into()), buildpacks: vec![], launcher_version: None, digest: None }
    }

    #[test]
    fn every_policy_by_change_kind_by_app_state() {
        use ActionKind::*;
        let old = built("sha256:old");
        let on_target = built("sha256:new-amd64");
        let states = [
            ("missing", AppState::Missing),
            ("not cnb", AppState::NotCnb),
            ("unreachable", AppState::Unreachable("timeout".into())),
            ("old run image", old),
            ("on target", on_target),
        ];
        // (policy, kind) → expected action per app state in the order above.
        let table: &[(Policy, ChangeKind, [Option<ActionKind>; 5])] = &[
            (Policy::Auto, ChangeKind::None, [None, None, None, None, None]),
            (Policy::Auto, ChangeKind::Rebase, [Some(Rebuild), Some(Rebuild), Some(Rebase), Some(Rebase), None]),
            (Policy::Auto, ChangeKind::Rebuild, [Some(Rebuild); 5]),
            (Policy::Auto, ChangeKind::Unknown, [Some(Rebuild); 5]),
            (Policy::Rebuild, ChangeKind::None, [None; 5]),
            (Policy::Rebuild, ChangeKind::Rebase, [Some(Rebuild); 5]),
            (Policy::Rebuild, ChangeKind::Rebuild, [Some(Rebuild); 5]),
            (Policy::Rebuild, ChangeKind::Unknown, [Some(Rebuild); 5]),
            (Policy::Rebase, ChangeKind::None, [None; 5]),
            (Policy::Rebase, ChangeKind::Rebase, [Some(Rebase); 5]),
            (Policy::Rebase, ChangeKind::Rebuild, [Some(Rebase); 5]),
            (Policy::Rebase, ChangeKind::Unknown, [Some(Rebase); 5]),
            (Policy::Notify, ChangeKind::None, [None; 5]),
            (Policy::Notify, ChangeKind::Rebase, [None; 5]),
            (Policy::Notify, ChangeKind::Rebuild, [None; 5]),
            (Policy::Notify, ChangeKind::Unknown, [None; 5]),
        ];
        let t = target();
        for (policy, kind, expected) in table {
            let c = change(*kind);
            let builders = ["jammy".to_string()];
            let mv = Move { change: &c, builders: &builders, run_image: Some(&t) };
            for ((label, state), want) in states.iter().zip(expected) {
                let images = [image("app", "jammy", *policy)];
                let apps = [("app".to_string(), state.clone())].into();
                let got = plan(&mv, &images, &apps);
                assert_eq!(got.len(), 1);
                assert_eq!(got[0].action, *want, "{policy:?} × {kind:?} × {label}: {}", got[0].why);
            }
        }
    }

    #[test]
    fn without_a_run_image_target_auto_rebuilds_and_forced_rebase_waits() {
        let c = change(ChangeKind::Rebase);
        let builders = ["jammy".to_string()];
        let mv = Move { change: &c, builders: &builders, run_image: None };
        let images = [image("a", "jammy", Policy::Auto), image("b", "jammy", Policy::Rebase)];
        let apps = [("a".to_string(), built("sha256:old")), ("b".to_string(), built("sha256:old"))].into();
        let got = plan(&mv, &images, &apps);
        assert_eq!(got[0].action, Some(ActionKind::Rebuild));
        assert_eq!(got[1].action, None);
    }

    #[test]
    fn only_images_of_affected_builders_are_planned() {
        let c = change(ChangeKind::Rebuild);
        let builders = ["jammy".to_string(), "noble".to_string()];
        let t = target();
        let mv = Move { change: &c, builders: &builders, run_image: Some(&t) };
        let images =
            [image("a", "jammy", Policy::Auto), image("b", "heroku", Policy::Auto), image("c", "noble", Policy::Auto)];
        let got = plan(&mv, &images, &BTreeMap::new());
        assert_eq!(got.iter().map(|d| d.image.as_str()).collect::<Vec<_>>(), ["a", "c"]);
    }

    #[test]
    fn assessment_against_the_current_pin() {
        let builder = BuilderMetadata {
            buildpacks: vec![Buildpack {
                id: "paketo-buildpacks/java".into(),
                version: Some("18.2.0".into()),
                homepage: None,
            }],
            lifecycle: crate::cnb::Lifecycle { version: Some("0.21.14".into()), ..Default::default() },
            ..Default::default()
        };
        let app = |java: &str, launcher: &str, run: &str| AppState::Built {
            run_image_digest: Some(run.into()),
            buildpacks: vec![Buildpack {
                id: "paketo-buildpacks/java".into(),
                version: Some(java.into()),
                homepage: None,
            }],
            launcher_version: Some(launcher.into()),
            digest: None,
        };
        let t = target();
        let i = image("app", "jammy", Policy::Auto);
        let d = assess(&i, &app("18.1.0", "0.21.14", "sha256:new"), Some(&builder), Some(&t), None);
        assert_eq!(d.action, Some(ActionKind::Rebuild));
        assert_eq!(d.why, "built with paketo-buildpacks/java 18.1.0; the builder has 18.2.0");
        // Another lifecycle is blamed only when the builder's lifecycle moved: a gap that was
        // there before is no rebuild (the daemon rebases such an app at a run image move).
        let mut lifecycle = Change::unknown("x");
        (lifecycle.note, lifecycle.kind, lifecycle.reasons) = (None, ChangeKind::Rebuild, vec![Reason::Lifecycle]);
        lifecycle.lifecycle = Some(crate::cnb::FromTo { from: Some("0.21.13".into()), to: Some("0.21.14".into()) });
        let d = assess(&i, &app("18.2.0", "0.21.13", "sha256:new"), Some(&builder), Some(&t), Some(&lifecycle));
        assert_eq!(d.why, "built with lifecycle 0.21.13; the builder has 0.21.14");
        let d = assess(&i, &app("18.2.0", "0.21.13", "sha256:new"), Some(&builder), Some(&t), None);
        assert_eq!((d.action, d.why.as_str()), (None, "up to date with the builder's pin"));
        let d = assess(&i, &app("18.2.0", "0.21.13", "sha256:old"), Some(&builder), Some(&t), None);
        assert_eq!(d.action, Some(ActionKind::Rebase), "as the daemon rebases it: {}", d.why);
        let d = assess(&i, &app("18.2.0", "0.21.14", "sha256:old"), Some(&builder), Some(&t), None);
        assert_eq!(d.action, Some(ActionKind::Rebase));
        let d = assess(&i, &app("18.2.0", "0.21.14", "sha256:new-amd64"), Some(&builder), Some(&t), None);
        assert_eq!((d.action, d.why.as_str()), (None, "up to date with the builder's pin"));
        let d = assess(&i, &AppState::Missing, Some(&builder), Some(&t), None);
        assert_eq!(d.action, Some(ActionKind::Rebuild));
        let forced = image("app", "jammy", Policy::Rebuild);
        let d = assess(&forced, &app("18.2.0", "0.21.14", "sha256:old"), Some(&builder), Some(&t), None);
        assert_eq!(d.action, Some(ActionKind::Rebuild));
        let notify = image("app", "jammy", Policy::Notify);
        assert_eq!(assess(&notify, &AppState::Missing, Some(&builder), Some(&t), None).action, None);

        // Built with a part the builder's labels never listed (a composite's `node-engine`): the
        // builder's own move is what the reason names first.
        let node = AppState::Built {
            run_image_digest: Some("sha256:new".into()),
            buildpacks: vec![Buildpack {
                id: "paketo-buildpacks/node-engine".into(),
                version: Some("3.2.1".into()),
                homepage: None,
            }],
            launcher_version: Some("0.21.14".into()),
            digest: None,
        };
        let d = assess(&i, &node, Some(&builder), Some(&t), None);
        assert_eq!(d.why, "built with paketo-buildpacks/node-engine 3.2.1, which the builder does not list");
        let mut java = Change::unknown("x");
        java.note = None;
        java.kind = ChangeKind::Rebuild;
        java.reasons = vec![Reason::Buildpack];
        java.buildpacks = vec![crate::cnb::BuildpackChange {
            id: "paketo-buildpacks/java".into(),
            from: Some("18.1.0".into()),
            to: Some("18.2.0".into()),
            republished: false,
        }];
        let d = assess(&i, &node, Some(&builder), Some(&t), Some(&java));
        assert_eq!(d.action, Some(ActionKind::Rebuild));
        assert_eq!(
            d.why,
            "the builder moved (paketo-buildpacks/java 18.1.0 → 18.2.0); \
             built with paketo-buildpacks/node-engine 3.2.1, which the builder does not list"
        );
        // A version move of the app's own buildpack is the reason itself.
        let d = assess(&i, &app("18.1.0", "0.21.14", "sha256:new"), Some(&builder), Some(&t), Some(&java));
        assert_eq!(d.why, "built with paketo-buildpacks/java 18.1.0; the builder has 18.2.0");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn kind() -> impl Strategy<Value = ChangeKind> {
            prop_oneof![
                Just(ChangeKind::None),
                Just(ChangeKind::Rebase),
                Just(ChangeKind::Rebuild),
                Just(ChangeKind::Unknown)
            ]
        }
        fn policy() -> impl Strategy<Value = Policy> {
            prop_oneof![Just(Policy::Auto), Just(Policy::Rebuild), Just(Policy::Rebase), Just(Policy::Notify)]
        }
        fn state() -> impl Strategy<Value = AppState> {
            prop_oneof![
                Just(AppState::Missing),
                Just(AppState::NotCnb),
                Just(AppState::Unreachable("x".into())),
                Just(built("sha256:old")),
                Just(built("sha256:new")),
            ]
        }

        proptest! {
            #[test]
            fn one_decision_per_image_never_two_actions(
                kind in kind(),
                with_target in any::<bool>(),
                apps in proptest::collection::vec((policy(), state()), 1..8),
            ) {
                let c = change(kind);
                let builders = ["jammy".to_string()];
                let t = target();
                let mv = Move { change: &c, builders: &builders, run_image: with_target.then_some(&t) };
                let images: Vec<ImageSettings> =
                    apps.iter().enumerate().map(|(n, (p, _))| image(&format!("app{n}"), "jammy", *p)).collect();
                let states: BTreeMap<String, AppState> =
                    apps.iter().enumerate().map(|(n, (_, s))| (format!("app{n}"), s.clone())).collect();
                let got = plan(&mv, &images, &states);
                prop_assert_eq!(got.len(), images.len());
                let names: BTreeSet<&str> = got.iter().map(|d| d.image.as_str()).collect();
                prop_assert_eq!(names.len(), images.len());
                for d in &got {
                    if kind == ChangeKind::None { prop_assert_eq!(d.action, None); }
                    if d.action == Some(ActionKind::Rebase) { prop_assert!(with_target, "a rebase needs a run image"); }
                }
            }
        }
    }
}

//! The one explanation of a move that `plan`, `diff`, `status`, the page, events and alerts all
//! show: what the move means for app images (rebase, rebuild, ...) and what moved (buildpacks,
//! lifecycle, stack, run image, base layers, packages, fixes), rendered as one line
//! `rebuild — paketo-buildpacks/java 18.1.0 → 18.2.0`. Each surface used to phrase this itself;
//! now they differ only in what they put around it.

use std::borrow::Cow;
use std::fmt;

use super::change::{SUMMARY_PACKAGES, fixes_brief, run_image_move};
use super::{Change, ChangeKind, Reason};
use crate::text::escape;

/// What a move means for app images and what moved, in the order people read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The cheapest correct reaction: the state word every surface uses for the move.
    pub action: ChangeKind,
    /// What moved, one part each (`paketo-buildpacks/java 18.1.0 → 18.2.0`, `lifecycle 0.21.13 →
    /// 0.21.14`, `run image … → …`); never empty. Registry names are escaped.
    pub moved: Vec<String>,
}

impl Explanation {
    /// The parts joined: `paketo-buildpacks/java 18.1.0 → 18.2.0; lifecycle 0.21.13 → 0.21.14`.
    pub fn moved(&self) -> String {
        self.moved.join("; ")
    }
}

impl fmt::Display for Explanation {
    /// `rebuild — paketo-buildpacks/java 18.1.0 → 18.2.0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} — {}", self.action.as_str(), self.moved())
    }
}

// Here rather than in `change.rs`, so that the change does not import its explanation back.
impl Change {
    /// What moved, for people: `heroku/nodejs 3.2.1 → 3.3.0; lifecycle 0.21.13 → 0.21.14` (the
    /// explanation's second half, see [`explain`]).
    pub fn details(&self) -> String {
        explain(self).moved()
    }

    /// The one line every surface shows for a move: `rebuild — heroku/nodejs 3.2.1 → 3.3.0`.
    pub fn summary(&self) -> String {
        explain(self).to_string()
    }
}

/// The explanation of a move. Pure: everything it says is in the change.
pub fn explain(change: &Change) -> Explanation {
    Explanation { action: change.kind, moved: moved_parts(change) }
}

fn moved_parts(change: &Change) -> Vec<String> {
    fn v(s: &Option<String>) -> Cow<'_, str> {
        s.as_deref().map(escape).unwrap_or(Cow::Borrowed("?"))
    }
    let mut parts: Vec<String> = Vec::new();
    for b in &change.buildpacks {
        let id = escape(&b.id);
        let (from, to) = (b.from.as_deref().map(escape), b.to.as_deref().map(escape));
        parts.push(match (from, to) {
            (Some(f), Some(t)) if b.republished => format!("{id} {f} republished ({t})"),
            (Some(f), Some(t)) => format!("{id} {f} → {t}"),
            (None, Some(t)) => format!("{id} {t} added"),
            (Some(f), None) => format!("{id} {f} removed"),
            (None, None) => format!("{id} changed"),
        });
    }
    if let Some(l) = &change.lifecycle {
        parts.push(format!("lifecycle {} → {}", v(&l.from), v(&l.to)));
    }
    if let Some(s) = &change.stack_id {
        parts.push(format!("stack {} → {}", v(&s.from), v(&s.to)));
    } else if change.reasons.contains(&Reason::StackId) && change.distro.is_none() {
        parts.push("target, mixins or CNB user changed".into());
    }
    if let Some(d) = &change.distro {
        parts.push(format!("distro {} → {}", v(&d.from), v(&d.to)));
    }
    if change.reasons.contains(&Reason::Order) {
        parts.push("detection order changed".into());
    }
    if let Some(r) = &change.run_image {
        parts.push(run_image_move(&v(&r.from), &v(&r.to)));
    } else if change.reasons.contains(&Reason::Stack) {
        parts.push("base layers changed".into());
    }
    if let Some(packages) = &change.packages {
        parts.push(packages.brief(SUMMARY_PACKAGES));
    }
    if let Some(fixes) = fixes_brief(change.fixes.as_deref()) {
        parts.push(fixes);
    }
    if !change.fixes_unknown.is_empty() {
        let n = change.fixes_unknown.len();
        parts.push(format!("{n} fix{} unknown", if n == 1 { "" } else { "es" }));
    }
    if let Some(note) = &change.note {
        parts.push(escape(note).into_owned());
    }
    if parts.is_empty() {
        parts.push(match change.kind {
            ChangeKind::None => "nothing that affects app images changed".into(),
            _ => "no details".into(),
        });
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cnb::{BuildpackChange, FromTo};

    fn java_move() -> Change {
        let mut c = Change::of_kind(ChangeKind::Rebuild);
        c.reasons = vec![Reason::Buildpack];
        c.buildpacks = vec![BuildpackChange {
            id: "paketo-buildpacks/java".into(),
            from: Some("18.1.0".into()),
            to: Some("18.2.0".into()),
            republished: false,
        }];
        c
    }

    #[test]
    fn a_buildpack_move_is_a_rebuild_naming_only_the_buildpack() {
        let e = explain(&java_move());
        assert_eq!(e.action, ChangeKind::Rebuild);
        assert_eq!(e.moved, vec!["paketo-buildpacks/java 18.1.0 → 18.2.0".to_string()]);
        assert_eq!(e.to_string(), "rebuild — paketo-buildpacks/java 18.1.0 → 18.2.0");
        assert!(!e.to_string().contains("lifecycle"), "{e}");
    }

    #[test]
    fn a_lifecycle_move_names_the_lifecycle_after_the_buildpacks() {
        let mut c = java_move();
        c.reasons.push(Reason::Lifecycle);
        c.lifecycle = Some(FromTo { from: Some("0.21.13".into()), to: Some("0.21.14".into()) });
        assert_eq!(
            explain(&c).to_string(),
            "rebuild — paketo-buildpacks/java 18.1.0 → 18.2.0; lifecycle 0.21.13 → 0.21.14"
        );
    }

    #[test]
    fn a_run_image_move_is_a_rebase_and_base_layers_alone_say_so() {
        let c = Change::run_image_moved("r.io/run@sha256:aaa".into(), "r.io/run@sha256:bbb".into());
        assert_eq!(explain(&c).to_string(), "rebase — run image sha256:aaa → sha256:bbb (r.io/run)");
        let mut base = Change::of_kind(ChangeKind::Rebase);
        base.reasons = vec![Reason::Stack];
        assert_eq!(explain(&base).to_string(), "rebase — base layers changed");
    }

    #[test]
    fn the_summary_and_details_of_a_change_are_its_explanation() {
        let c = java_move();
        assert_eq!(c.summary(), explain(&c).to_string());
        assert_eq!(c.details(), explain(&c).moved());
        assert_eq!(explain(&Change::of_kind(ChangeKind::None)).moved(), "nothing that affects app images changed");
    }

    #[test]
    fn registry_names_are_escaped() {
        let mut c = java_move();
        c.buildpacks[0].id = "evil\u{1b}[2J".into();
        assert!(!explain(&c).to_string().contains('\u{1b}'), "{}", explain(&c));
    }
}

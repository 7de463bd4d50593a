//! The top of the status page: the freeze banner, while a freeze is in force, and the tiles that
//! count what needs a look, each a link to its section.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::html::{Text, ago_at, anchor};
use super::watches::failing_first;
use crate::status::Status;

/// Who froze, since when and why, and how to lift it: a freeze stops every action start, so it
/// goes above everything else.
pub(super) fn banner(out: &mut String, status: &Status, now: DateTime<Utc>) {
    let Some(f) = &status.rollout.frozen else { return };
    let reason =
        f.reason.as_deref().map(|r| format!(": <span class=\"reason\">{}</span>", Text(r))).unwrap_or_default();
    let _ = writeln!(
        out,
        "<div class=\"banner\" id=\"frozen\" role=\"status\"><b>Frozen</b> by <span class=\"name\">{}</span> \
         since {}{reason}. No rebase, rebuild or deploy starts until <code>builder-monitor unfreeze</code> lifts \
         it; checks and alerts go on.</div>",
        Text(&f.by),
        ago_at(f.since, now)
    );
}

/// One tile: a count (or yes/no) and what it counts, a link to `target` when there is a section
/// to go to; `tone` (`bad`, `warn`) colours the value when it is not zero.
struct Tile<'a> {
    key: &'a str,
    value: String,
    label: &'a str,
    target: Option<String>,
    tone: Option<&'a str>,
}

impl Tile<'_> {
    fn write(&self, out: &mut String) {
        let class = match self.tone {
            Some(tone) => format!("tile {tone}"),
            None => "tile".into(),
        };
        let inner = format!("<b>{}</b><span>{}</span>", self.value, self.label);
        let _ = match &self.target {
            Some(target) => {
                write!(out, "<a class=\"{class}\" data-tile=\"{}\" href=\"#{target}\">{inner}</a>", self.key)
            }
            None => write!(out, "<div class=\"{class}\" data-tile=\"{}\">{inner}</div>", self.key),
        };
    }
}

/// A count tile whose `tone` applies only when `n` is not zero.
fn count<'a>(key: &'a str, n: usize, label: &'a str, target: Option<String>, tone: Option<&'a str>) -> Tile<'a> {
    Tile { key, value: n.to_string(), label, target, tone: tone.filter(|_| n > 0) }
}

pub(super) fn tiles(out: &mut String, status: &Status, failing: usize) {
    let section = |id: &str, shown: bool| shown.then(|| id.to_string());
    // The failing tile goes to the first failing row (failing rows come first in their table).
    let first_failing = failing_first(&status.builders)
        .into_iter()
        .chain(failing_first(&status.run_images))
        .find(|w| w.consecutive_failures > 0)
        .map(|w| anchor("watch", &w.name));
    let held: BTreeSet<&str> = status.deploys.iter().filter(|d| d.held.is_some()).map(|d| d.image.as_str()).collect();
    let frozen = status.rollout.frozen.is_some();

    out.push_str("<div class=\"tiles\">");
    count("builders", status.builders.len(), "builders", section("builders", true), None).write(out);
    let runs = !status.run_images.is_empty();
    count("run-images", status.run_images.len(), "run images", section("run-images", runs), None).write(out);
    if !status.images.is_empty() {
        count("images", status.images.len(), "app images", section("images", true), None).write(out);
    }
    count("failing", failing, "failing", first_failing, Some("bad")).write(out);
    count("actions", status.pending.len(), "open actions", section("actions", true), None).write(out);
    let value = if frozen { "yes" } else { "no" }.to_string();
    let tone = frozen.then_some("warn");
    Tile { key: "frozen", value, label: "frozen", target: section("frozen", frozen), tone }.write(out);
    if !status.deploys.is_empty() {
        count("held", held.len(), "deploys held", section("deploys", true), Some("bad")).write(out);
    }
    count("dead-letters", status.dead_letters.len(), "dead letters", section("dead-letters", true), Some("bad"))
        .write(out);
    out.push_str("</div>\n");
}

//! The status page's App images section: each `[[images]]` entry with the digest its tag's last
//! recorded move left, its builder and run image, and its newest action in whatever state — so a
//! failed, rejected or held action stays on the page after it left the open actions.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::html::{Breakable, Shortened, Text, ago, ago_at, anchor, at_digest, short};
use crate::config::Config;
use crate::ledger::ActionState;
use crate::status::{ImageAction, ImageStatus, Status};

/// The colour of an action's state: red for what needs a person (failed, rejected, held, or
/// holding its image), amber for what waits, green for what runs or ran, grey for what was
/// dropped. The state is a class of the pill too (`pill err failed`).
pub(super) fn tone(a: &ImageAction) -> &'static str {
    match a.state {
        _ if a.holds => "err",
        // Kueue holds it, or a gate: not running yet.
        _ if a.shown != a.state.as_str() => "warn",
        ActionState::Failed | ActionState::Rejected | ActionState::Held => "err",
        ActionState::Pending | ActionState::AwaitingApproval => "warn",
        ActionState::Running | ActionState::Succeeded => "ok",
        ActionState::Superseded | ActionState::Skipped => "muted",
    }
}

/// The section's table (the caller writes its heading).
pub(super) fn table(out: &mut String, status: &Status, config: &Config, now: DateTime<Utc>) {
    out.push_str("<div class=\"card\">");
    out.push_str(
        "<table class=\"images\"><thead><tr><th>Image</th><th>Digest</th><th>Builder</th><th>Run image</th>\
         <th>Last action</th><th>Detail</th></tr></thead><tbody>\n",
    );
    for i in &status.images {
        let state = i.last_action.as_ref().map_or("none", |a| a.shown);
        let _ = write!(
            out,
            "<tr class=\"image\" data-name=\"{}\" data-state=\"{state}\"><td data-label=\"Image\" id=\"{}\">\
             <span class=\"name\">{}</span>{}<span class=\"sub\"><code>{}</code></span></td>",
            Text(&i.name),
            anchor("image", &i.name),
            Text(&i.name),
            signed_mark(i),
            Breakable(&i.image)
        );
        let _ = write!(out, "<td data-label=\"Digest\">{}</td>", digest(i, now));
        let builder = config.image(&i.name).map(|c| c.builder.as_str());
        let _ = write!(out, "<td data-label=\"Builder\">{}</td>", builder_cell(status, builder));
        let _ = write!(out, "<td data-label=\"Run image\">{}</td>", app_run_image(status, i, builder));
        match &i.last_action {
            Some(a) => {
                let _ = write!(
                    out,
                    "<td data-label=\"Last action\">{} <span class=\"pill {} {}\">{}</span>\
                     <span class=\"sub\">{} · change <code>{}</code></span></td><td data-label=\"Detail\">{}</td>",
                    Text(&a.action),
                    tone(a),
                    a.shown,
                    a.shown.replace('_', " "),
                    ago_at(a.updated, now),
                    Text(&a.change),
                    detail(a, status)
                );
            }
            None => out.push_str(
                "<td data-label=\"Last action\"><span class=\"muted\">none recorded</span></td><td data-label=\"Detail\"></td>",
            ),
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

/// Whether its current digest is signed, as far as the ledger knows: by which key (its id on
/// hover), or found unsigned; nothing when unknown.
fn signed_mark(i: &ImageStatus) -> String {
    match (&i.signed, i.unsigned) {
        (Some(key_id), _) => {
            format!(" <span class=\"pill ok signed\" title=\"signed by key {}\">signed</span>", Text(key_id))
        }
        (None, true) => {
            " <span class=\"pill err unsigned\" title=\"no valid signature by a trusted key\">unsigned</span>".into()
        }
        (None, false) => String::new(),
    }
}

/// Where the tag's last recorded move left it (the full reference on hover), and how.
fn digest(i: &ImageStatus, now: DateTime<Utc>) -> String {
    let Some(digest) = &i.digest else {
        return "<span class=\"muted\">no tag move recorded</span>".into();
    };
    let mut cell = format!(
        "<code class=\"digest\" title=\"{}\">{}</code>",
        Text(&at_digest(&i.image, digest)),
        Text(short(digest))
    );
    if let Some(m) = i.moves.first() {
        let by = m.by.as_deref().map(|by| format!(" by {}", Text(by))).unwrap_or_default();
        let _ = write!(cell, "<span class=\"sub\">{}{by} {}</span>", m.kind.as_str(), ago(&m.time, now));
    }
    cell
}

fn builder_cell(status: &Status, builder: Option<&str>) -> String {
    match builder {
        Some(b) if status.builders.iter().any(|w| w.name == b) => {
            format!("<a href=\"#{}\"><span class=\"name\">{}</span></a>", anchor("watch", b), Text(b))
        }
        Some(b) => format!("<span class=\"name\">{}</span>", Text(b)),
        None => "<span class=\"muted\">–</span>".into(),
    }
}

/// The run image the app itself runs on, as its last recorded move left it (a rebase's, a
/// rebuild's, or after a rollback the one its digest was made with), marked when its builder's
/// run image watch is pinned elsewhere: the app is behind it. Without one recorded, its builder's
/// run image, said to be the builder's.
fn app_run_image(status: &Status, i: &ImageStatus, builder: Option<&str>) -> String {
    let Some(own) = i.moves.first().and_then(|m| m.run_image.as_deref()) else {
        let builders = run_image(status, builder);
        return format!("{builders}<span class=\"sub muted\">the builder's; the app's own is not recorded yet</span>");
    };
    let (repository, digest) = own.split_once('@').unwrap_or((own, ""));
    let mut cell = format!(
        "<code>{}</code><span class=\"sub\"><code class=\"digest\" title=\"{}\">{}</code></span>",
        Breakable(repository),
        Text(own),
        Text(short(digest))
    );
    let pinned = builder
        .and_then(|b| status.run_images.iter().find(|r| r.builders.iter().any(|name| name == b)))
        .and_then(|r| r.pinned.as_ref().map(|p| (r, p)));
    // The app's metadata may name a platform's manifest of the pinned index: the same run image.
    if let Some((run, pin)) = pinned
        && pin.digest != digest
        && !run.platforms.values().any(|d| d == digest)
    {
        let _ = write!(
            cell,
            "<span class=\"sub\"><span class=\"pill warn behind\">behind</span> its builder's \
             <a href=\"#{}\"><code class=\"digest\" title=\"{}\">{}</code></a></span>",
            anchor("watch", &run.name),
            Text(&pin.reference),
            Text(short(&pin.digest))
        );
    }
    cell
}

/// The run image of the image's builder: its watch (linked, with its pin) when the builder's run
/// image is watched, else what the builder's metadata names.
fn run_image(status: &Status, builder: Option<&str>) -> String {
    let Some(builder) = builder else { return "<span class=\"muted\">–</span>".into() };
    if let Some(run) = status.run_images.iter().find(|r| r.builders.iter().any(|b| b == builder)) {
        let pinned = match &run.pinned {
            Some(p) => {
                format!("<code class=\"digest\" title=\"{}\">{}</code>", Text(&p.reference), Text(short(&p.digest)))
            }
            None => "<span class=\"muted\">not pinned yet</span>".into(),
        };
        return format!(
            "<a href=\"#{}\"><code>{}</code></a><span class=\"sub\">{pinned}</span>",
            anchor("watch", &run.name),
            Breakable(&run.image)
        );
    }
    match status.builders.iter().find(|w| w.name == builder).and_then(|w| w.run_image.as_deref()) {
        Some(run) => format!("<code>{}</code><span class=\"sub\">not watched</span>", Breakable(run)),
        None => "<span class=\"muted\">not known yet</span>".into(),
    }
}

/// Why the action waits while it is open (a held one: why it is held, and how to let it go),
/// else what it said (why it failed, was superseded or skipped); who rejected it; that it holds
/// its image.
fn detail(a: &ImageAction, status: &Status) -> String {
    let mut parts = Vec::new();
    match status.pending.iter().find(|p| p.key == a.key).and_then(|p| p.waiting_for.as_deref()) {
        Some(why) => parts.push(Shortened(why).to_string()),
        None => parts.extend(a.detail.as_deref().map(|d| Breakable(d).to_string())),
    }
    if a.state == ActionState::Rejected
        && let Some(by) = &a.decided_by
    {
        parts.push(format!("rejected by {}", Text(by)));
    }
    if a.holds {
        parts.push(format!(
            "holds the image until a newer change or <code>builder-monitor release {}</code>",
            Text(&a.change)
        ));
    }
    if parts.is_empty() {
        return "<span class=\"muted\">–</span>".into();
    }
    let rest: String = parts[1..].iter().map(|p| format!("<span class=\"sub\">{p}</span>")).collect();
    format!("{}{rest}", parts[0])
}

#[cfg(test)]
mod tests {
    use super::super::tests::{config, digest, empty, now, watch};
    use super::*;
    use crate::ledger::{OpenAction, TagMoveKind};
    use crate::status::{PinnedStatus, TagMoveStatus};
    use builder_monitor_core::schedule::parse_timestamp;

    fn image(name: &str, action: Option<(&str, ActionState, &str)>) -> ImageStatus {
        ImageStatus {
            name: name.into(),
            image: format!("registry.example.com/apps/{name}:latest"),
            digest: None,
            previous: None,
            moves: Vec::new(),
            signed: None,
            unsigned: false,
            signature: None,
            attestation: None,
            last_action: action.map(|(kind, state, detail)| ImageAction {
                key: format!("bm-{name}"),
                change: "c7".into(),
                action: kind.into(),
                state,
                shown: state.as_str(),
                updated: parse_timestamp("2025-03-04T11:00:00Z").unwrap(),
                detail: (!detail.is_empty()).then(|| detail.into()),
                decided_by: (state == ActionState::Rejected).then(|| "alice (cli)".into()),
                holds: false,
                pool: None,
            }),
        }
    }

    /// An app whose last move recorded its run image shows that one, not its builder's: after a
    /// rollback to a digest built on an older run image, it is marked behind its builder's.
    #[test]
    fn an_app_shows_its_own_run_image_and_when_it_is_behind_its_builders() {
        let config = config(
            "[[images]]\nname = \"shop\"\nbuilder = \"jammy\"\nimage = \"registry.example.com/apps/shop:latest\"\n\n\
             [[images]]\nname = \"cart\"\nbuilder = \"jammy\"\nimage = \"registry.example.com/apps/cart:latest\"\n",
        );
        let mut run = watch("run:registry.example.com/paketo/run:latest", "registry.example.com/paketo/run:latest");
        run.builders = vec!["jammy".into()];
        run.pinned = Some(PinnedStatus {
            digest: digest('e'),
            reference: format!("registry.example.com/paketo/run@{}", digest('e')),
            since: "2025-03-04T09:00:00Z".into(),
        });
        let mut status = empty(vec![watch("jammy", "registry.example.com/paketo/builder:latest")]);
        status.run_images.push(run);
        let moved = |kind, run: char| TagMoveStatus {
            time: "2025-03-04T10:00:00.000Z".into(),
            kind,
            action: None,
            previous: Some(digest('b')),
            digest: Some(digest('a')),
            by: None,
            run_image: Some(format!("registry.example.com/paketo/run@{}", digest(run))),
        };
        let mut shop = image("shop", None);
        shop.moves.push(moved(TagMoveKind::Rollback, 'd'));
        let mut cart = image("cart", None);
        cart.moves.push(moved(TagMoveKind::Rebase, 'e'));
        status.images = vec![shop, cart];
        let mut html = String::new();
        table(&mut html, &status, &config, now());
        let row = |name: &str| {
            let start = html.find(&format!("<tr class=\"image\" data-name=\"{name}\"")).unwrap();
            html[start..start + html[start..].find("</tr>").unwrap()].to_string()
        };
        let (shop, cart) = (row("shop"), row("cart"));
        assert!(shop.contains(">sha256:dddddddddddd</code>"), "the app's own: {shop}");
        assert!(shop.contains("<span class=\"pill warn behind\">behind</span> its builder's"), "{shop}");
        assert!(shop.contains(">sha256:eeeeeeeeeeee</code></a>"), "{shop}");
        assert!(cart.contains(">sha256:eeeeeeeeeeee</code>") && !cart.contains("behind"), "{cart}");
    }

    /// One row per image: the digest with its reference on hover, the builder and its run image
    /// as links to their rows, and the last action's state as the pill's class, coloured.
    #[test]
    fn each_image_shows_its_digest_builder_run_image_and_last_action() {
        let images: String = [
            ("petclinic", "jammy"),
            ("orders", "jammy"),
            ("billing", "heroku"),
            ("api", "heroku"),
            ("web", "jammy"),
        ]
        .map(|(n, b)| {
            format!("[[images]]\nname = \"{n}\"\nbuilder = \"{b}\"\nimage = \"registry.example.com/apps/{n}:latest\"\n")
        })
        .join("\n");
        let config = config(&images);
        let mut jammy = watch("jammy", "registry.example.com/paketo/builder:latest");
        jammy.run_image = Some("registry.example.com/paketo/run:latest".into());
        let mut run = watch("run:registry.example.com/paketo/run:latest", "registry.example.com/paketo/run:latest");
        run.builders = vec!["jammy".into()];
        run.pinned = Some(PinnedStatus {
            digest: digest('e'),
            reference: format!("registry.example.com/paketo/run@{}", digest('e')),
            since: "2025-03-04T09:00:00Z".into(),
        });
        let mut status = empty(vec![jammy, watch("heroku", "registry.example.com/heroku/builder:24")]);
        status.run_images.push(run);

        let mut petclinic = image("petclinic", Some(("rebuild", ActionState::Failed, "exit 1: pack build failed")));
        petclinic.digest = Some(digest('a'));
        petclinic.moves.push(TagMoveStatus {
            time: "2025-03-04T10:00:00.000Z".into(),
            kind: TagMoveKind::Rebase,
            action: Some("bm-x".into()),
            previous: Some(digest('b')),
            digest: Some(digest('a')),
            by: None,
            run_image: None,
        });
        let orders = image("orders", Some(("deploy", ActionState::Held, "held: canary petclinic failed")));
        status.pending.push(OpenAction {
            key: "bm-orders".into(),
            change: "c7".into(),
            image: "orders".into(),
            action: builder_monitor_core::plan::ActionKind::Deploy,
            state: ActionState::Held,
            attempts: 0,
            next_attempt: now(),
            wave: 2,
            detail: Some("held: canary petclinic failed".into()),
            waiting_for: Some("held: canary petclinic failed; `builder-monitor release c7` lets it go".into()),
            gate: Some("held"),
            placed: None,
        });
        let mut web = image("web", Some(("deploy", ActionState::Failed, "Deployment shop/web: failed")));
        web.last_action.as_mut().unwrap().holds = true;
        status.images = vec![
            petclinic,
            orders,
            image("billing", Some(("rebase", ActionState::Rejected, ""))),
            image("api", None),
            web,
        ];
        let mut html = String::new();
        table(&mut html, &status, &config, now());
        let row = |name: &str| {
            let start = html.find(&format!("<tr class=\"image\" data-name=\"{name}\"")).unwrap();
            &html[start..start + html[start..].find("</tr>").unwrap()]
        };

        let petclinic = row("petclinic");
        assert!(
            petclinic.contains("data-state=\"failed\"><td data-label=\"Image\" id=\"image-petclinic\">"),
            "{petclinic}"
        );
        let reference = format!("registry.example.com/apps/petclinic@{}", digest('a'));
        assert!(petclinic.contains(&format!("<code class=\"digest\" title=\"{reference}\">sha256:aaaaaaaaaaaa</code><span class=\"sub\">rebase <time")), "{petclinic}");
        assert!(petclinic.contains("<a href=\"#watch-jammy\"><span class=\"name\">jammy</span></a>"), "{petclinic}");
        assert!(petclinic.contains("<a href=\"#watch-run:registry.example.com/paketo/run:latest\"><code>registry.example.com/<wbr>paketo/<wbr>run:latest</code></a>"), "{petclinic}");
        assert!(petclinic.contains(">sha256:eeeeeeeeeeee</code>"), "{petclinic}");
        assert!(petclinic.contains("rebuild <span class=\"pill err failed\">failed</span><span class=\"sub\"><time datetime=\"2025-03-04T11:00:00Z\""), "{petclinic}");
        assert!(petclinic.contains("exit 1: pack build failed"), "{petclinic}");

        let orders = row("orders");
        assert!(orders.contains("<span class=\"pill err held\">held</span>"), "{orders}");
        assert!(
            orders.contains("held: canary petclinic failed; `builder-monitor release c7` lets it go</td>"),
            "{orders}"
        );
        let billing = row("billing");
        assert!(
            billing.contains("<span class=\"pill err rejected\">rejected</span>")
                && billing.contains("rejected by alice (cli)"),
            "{billing}"
        );
        assert!(
            billing.contains("<span class=\"muted\">not known yet</span>") && billing.contains("no tag move recorded"),
            "{billing}"
        );
        assert!(petclinic.contains("the builder's; the app's own is not recorded yet"), "{petclinic}");
        let api = row("api");
        assert!(api.contains("data-state=\"none\"") && api.contains("none recorded"), "{api}");
        let web = row("web");
        assert!(web.contains("<span class=\"pill err failed\">failed</span>"), "{web}");
        assert!(
            web.contains("holds the image until a newer change or <code>builder-monitor release c7</code>"),
            "{web}"
        );
    }

    #[test]
    fn states_are_coloured_by_what_they_ask_of_a_person() {
        let tone_of = |state, holds| {
            let mut i = image("app", Some(("deploy", state, "")));
            i.last_action.as_mut().unwrap().holds = holds;
            tone(i.last_action.as_ref().unwrap())
        };
        assert_eq!(tone_of(ActionState::Failed, false), "err");
        assert_eq!(tone_of(ActionState::Rejected, false), "err");
        assert_eq!(tone_of(ActionState::Held, false), "err");
        assert_eq!(tone_of(ActionState::Succeeded, true), "err", "a deploy that holds its image");
        assert_eq!(tone_of(ActionState::AwaitingApproval, false), "warn");
        assert_eq!(tone_of(ActionState::Succeeded, false), "ok");
        assert_eq!(tone_of(ActionState::Superseded, false), "muted");
    }
}

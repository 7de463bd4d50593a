//! The status page's registries section: each registry of the app images and whether it serves
//! the OCI 1.1 referrers API, as the daemon found (`status`'s `registries`).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::html::{Text, ago};
use crate::status::RegistryStatus;

/// The section's table (the caller writes its heading).
pub(super) fn table(out: &mut String, registries: &[RegistryStatus], now: DateTime<Utc>) {
    out.push_str("<div class=\"card\">");
    out.push_str(
        "<table class=\"registries\"><thead><tr><th>Registry</th><th>Referrers API</th></tr></thead><tbody>\n",
    );
    for r in registries {
        let (tone, answer) = match r.referrers {
            Some(true) => ("ok", "true"),
            Some(false) => ("muted", "false"),
            None => ("muted", "null"),
        };
        let why = match (r.referrers, &r.probed) {
            (Some(true), Some(at)) => format!("bundles listed through the API; asked {}", ago(at, now)),
            (Some(false), Some(at)) => format!("bundles listed under the referrers tag schema; asked {}", ago(at, now)),
            _ => "not asked yet: asked at the first signature written there".to_string(),
        };
        let _ = writeln!(
            out,
            "<tr class=\"registry\" data-host=\"{}\" data-referrers=\"{answer}\"><td data-label=\"Registry\"><code>{}</code></td>\
             <td data-label=\"Referrers API\"><span class=\"pill {tone}\">{answer}</span><span class=\"sub\">{why}</span></td></tr>",
            Text(&r.host),
            Text(&r.host),
        );
    }
    out.push_str("</tbody></table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_registry_shows_its_answer_or_null() {
        let now = Utc::now();
        let at = builder_monitor_core::schedule::timestamp(now);
        let registries = [
            RegistryStatus { host: "a.example".into(), referrers: Some(true), probed: Some(at.clone()) },
            RegistryStatus { host: "b.example:5000".into(), referrers: Some(false), probed: Some(at) },
            RegistryStatus { host: "c.example".into(), referrers: None, probed: None },
        ];
        let mut out = String::new();
        table(&mut out, &registries, now);
        assert!(out.contains("data-host=\"a.example\" data-referrers=\"true\""), "{out}");
        assert!(out.contains("data-host=\"b.example:5000\" data-referrers=\"false\""), "{out}");
        assert!(out.contains("data-host=\"c.example\" data-referrers=\"null\""), "{out}");
        assert!(out.contains("not asked yet"), "{out}");
    }
}

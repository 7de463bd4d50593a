//! What `check` prints of a config: where state lives, how each registry is reached, what is
//! watched, built, deployed and alerted.

use super::{Config, Credentials, StateLocation};
use builder_monitor_core::plan::ActionKind;

impl Config {
    /// What `check` prints: where state lives, how each registry is reached, what is watched.
    pub fn summary(&self) -> String {
        let mut out = format!("config: {}\n", self.source.display());
        match &self.monitor.state {
            StateLocation::Sqlite(path) => out.push_str(&format!("state:  {} (SQLite)\n", path.display())),
            StateLocation::Kubernetes => {
                out.push_str(&format!("state:  ConfigMaps in namespace {} (Kubernetes)\n", self.kubernetes.namespace))
            }
        }
        let mut hosts: Vec<String> = self.registries.keys().cloned().collect();
        for b in &self.builders {
            if !hosts.iter().any(|h| h == b.image.registry()) {
                hosts.push(b.image.registry().to_string());
            }
        }
        hosts.sort();
        out.push_str(&format!("registries ({}):\n", hosts.len()));
        for host in hosts {
            let r = self.registry(&host);
            let rate = match r.requests_per_second {
                Some(rps) => format!("{rps} req/s, burst {}", r.burst),
                None => "no rate limit".to_string(),
            };
            let auth = match &r.credentials {
                Credentials::Anonymous => "anonymous".to_string(),
                Credentials::Basic { username, source, .. } => format!("user {username} ({source})"),
                Credentials::Helper { program, source, .. } => format!("{} ({source})", program.display()),
            };
            out.push_str(&format!(
                "  {host}: {}, {rate}, {auth}, timeout {}, {}{}\n",
                if r.insecure { "http" } else { "https" },
                humantime::format_duration(r.timeout),
                builder_monitor_core::text::count(r.max_attempts, "attempt"),
                if r.ca_pem.is_some() { ", extra CA" } else { "" },
            ));
        }
        out.push_str(&format!("builders ({}):\n", self.builders.len()));
        for b in &self.builders {
            let platforms = match &b.platforms {
                None => "all platforms".to_string(),
                Some(list) => list.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            };
            let mut settle =
                b.settle.map(|s| format!(", settle {}", humantime::format_duration(s))).unwrap_or_default();
            if !b.watch_run_image {
                settle.push_str(", run image not watched");
            }
            out.push_str(&format!(
                "  {}: {}\n      {}, jitter up to {}, {platforms}{settle}\n",
                b.name,
                b.image,
                b.schedule,
                humantime::format_duration(b.jitter),
            ));
            let next = b.schedule.next_firings(chrono::Utc::now(), 3);
            if !next.is_empty() {
                let next: Vec<String> = next.into_iter().map(builder_monitor_core::schedule::firing_text).collect();
                out.push_str(&format!("      next: {}\n", next.join(", ")));
            }
        }
        out.push_str(&format!("images ({}):\n", self.images.len()));
        for i in &self.images {
            let wave = if i.wave == super::DEFAULT_WAVE { String::new() } else { format!(", wave {}", i.wave) };
            let approve = if i.approve { ", approval" } else { "" };
            let deploy = match i.deploy.as_slice() {
                [] => String::new(),
                workloads => {
                    let each: Vec<String> = workloads.iter().map(ToString::to_string).collect();
                    let undo = i.undo.map(|u| format!(", undo {}", u.as_str())).unwrap_or_default();
                    format!(", deploys to {}{undo}", each.join(", "))
                }
            };
            out.push_str(&format!(
                "  {}: {} (builder {}, policy {}{wave}{approve}{deploy})\n",
                i.name,
                i.image,
                i.builder,
                i.policy.as_str()
            ));
        }
        let r = &self.runner;
        out.push_str(&format!(
            "runner: {}, rebases by {}, {} at a time{}, {}, backoff {}\n",
            r.kind.as_str(),
            r.rebase.as_str(),
            r.max_concurrent,
            match r.in_registry(ActionKind::Rebase) {
                true => format!(" ({} registry rebases)", r.max_registry_rebases),
                false => String::new(),
            },
            builder_monitor_core::text::count(r.max_attempts, "attempt"),
            humantime::format_duration(r.backoff)
        ));
        for p in &r.pools {
            let cluster =
                p.cluster.as_ref().and_then(|c| c.kubeconfig.as_ref()).map(|k| format!(", cluster {}", k.display()));
            let queue = p.queue.as_ref().map(|q| format!(", Kueue queue {q}")).unwrap_or_default();
            out.push_str(&format!(
                "  pool {}: {} in namespace {}{}, {}{queue}\n",
                p.name,
                p.kind.as_str(),
                p.settings.namespace,
                cluster.unwrap_or_default(),
                p.platforms_text()
            ));
        }
        out.push_str(&super::rollout::summary(&self.rollout).unwrap_or_default());
        for g in &self.gitops {
            let branch = if g.push_branch == g.branch {
                g.branch.clone()
            } else {
                format!("{} → {}", g.branch, g.push_branch)
            };
            out.push_str(&format!("gitops {}: {} ({branch}), {} files\n", g.name, g.repo, g.files.len()));
        }
        out.push_str(&format!("alerts ({}):\n", self.alerts.len()));
        for a in &self.alerts {
            let builders = if a.builders.is_empty() { "all builders".to_string() } else { a.builders.join(", ") };
            out.push_str(&format!(
                "  {}: {} {}{}\n      events {}; {builders}; timeout {}, retries from {} for up to {}\n",
                a.name,
                a.kind.as_str(),
                a.url,
                if a.secret.is_some() { ", signed" } else { "" },
                a.events.join(", "),
                humantime::format_duration(a.timeout),
                humantime::format_duration(a.backoff),
                humantime::format_duration(a.give_up_after),
            ));
        }
        out
    }
}

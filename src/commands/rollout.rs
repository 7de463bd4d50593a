//! What `approve`, `reject`, `release`, `freeze` and `unfreeze` share: a person's roll-out request,
//! written to the ledger directly when no daemon holds it, else sent to the running daemon's API
//! (the ledger has one writer).

use std::path::Path;

use anyhow::Context;

use super::common::load_config;
use super::daemon_api::{call_daemon, encode_segment};
use super::failure::{Failure, usage};
use builder_monitor::config::{Config, Secrets, StateLocation};
use builder_monitor::daemon::{self, Access};
use builder_monitor::ledger::{LedgerError, Verdict, WriterLock};
use builder_monitor::rollout::{self, Decision, FreezeOutcome, RolloutError};
use builder_monitor::schedule::Clock;

/// One roll-out request of a person.
pub enum Request {
    Decide { change: String, image: Option<String>, verdict: Verdict },
    Freeze { reason: Option<String> },
    Unfreeze,
}

pub async fn run(config: &Path, request: Request, json: bool) -> Result<u8, Failure> {
    let config = load_config(config, Secrets::Skip)?;
    if let Request::Decide { change, .. } = &request
        && change.trim().is_empty()
    {
        return Err(usage(anyhow::anyhow!("the change id is empty (see `builder-monitor status`)")));
    }
    let clock = Clock::System;
    let by = rollout::cli_user();
    let answer = match &config.monitor.state {
        StateLocation::Sqlite(path) => match WriterLock::acquire(path, clock.now()) {
            Ok(_writer) => direct(&config, &request, &by, &clock).await?,
            Err(LedgerError::Locked { holder, .. }) => through_api(&config, &request, &by, &holder).await?,
            Err(e) => return Err(e.into()),
        },
        // Every replica writes the shared ledger; a write that races another is retried there.
        StateLocation::Kubernetes => direct(&config, &request, &by, &clock).await?,
    };
    match answer {
        Answer::Decision(d) if json => outln!("{}", serde_json::to_string_pretty(&d).context("encoding JSON")?),
        Answer::Decision(d) => out!("{}", d.render_text()),
        Answer::Freeze(f) if json => outln!("{}", serde_json::to_string_pretty(&f).context("encoding JSON")?),
        Answer::Freeze(f) => out!("{}", render_freeze(&f)),
    }
    Ok(0)
}

enum Answer {
    Decision(Decision),
    Freeze(FreezeOutcome),
}

fn render_freeze(f: &FreezeOutcome) -> String {
    match (&f.frozen, f.changed) {
        (Some(frozen), changed) => {
            let reason = frozen.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
            let how = if changed { "frozen" } else { "already frozen" };
            format!(
                "{how} since {} by {}{reason};\n  {} until `builder-monitor unfreeze`\n",
                builder_monitor_core::schedule::timestamp(frozen.since),
                frozen.by,
                builder_monitor_core::rollout::FREEZE_STOPS
            )
        }
        (None, true) => "unfrozen: waiting actions start again\n".into(),
        (None, false) => "not frozen; nothing changed\n".into(),
    }
}

async fn direct(config: &Config, request: &Request, by: &str, clock: &Clock) -> Result<Answer, Failure> {
    let ledger = daemon::open_ledger(config, Access::Write, clock).await?;
    let now = clock.now();
    let answer = match request {
        Request::Decide { change, image, verdict } => Answer::Decision(
            rollout::decide(config, &ledger, change, image.as_deref(), *verdict, by, now).await.map_err(failure)?,
        ),
        Request::Freeze { reason } => {
            Answer::Freeze(rollout::freeze(config, &ledger, reason.clone(), by, now).await.map_err(failure)?)
        }
        Request::Unfreeze => Answer::Freeze(rollout::unfreeze(config, &ledger, by, now).await.map_err(failure)?),
    };
    Ok(answer)
}

/// An unknown change or image is the caller's mistake (exit 2); the rest a runtime failure.
fn failure(e: RolloutError) -> Failure {
    match e {
        RolloutError::UnknownChange(_) | RolloutError::UnknownImage { .. } => usage(e),
        other => other.into(),
    }
}

/// Sends the request to the daemon that holds the ledger, at its `[server] listen` address.
async fn through_api(config: &Config, request: &Request, by: &str, holder: &str) -> Result<Answer, Failure> {
    let (method, path, body) = match request {
        Request::Decide { change, image, verdict } => (
            reqwest::Method::POST,
            format!("changes/{}/{}", encode_segment(change), verdict.as_str()),
            serde_json::json!({ "image": image, "by": by }),
        ),
        Request::Freeze { reason } => {
            (reqwest::Method::POST, "freeze".to_string(), serde_json::json!({ "reason": reason, "by": by }))
        }
        Request::Unfreeze => (reqwest::Method::DELETE, "freeze".to_string(), serde_json::json!({ "by": by })),
    };
    let text = call_daemon(config, holder, method, &path, body).await?;
    let answer = match request {
        Request::Decide { .. } => Answer::Decision(serde_json::from_str(&text).context("reading the daemon's answer")?),
        _ => Answer::Freeze(serde_json::from_str(&text).context("reading the daemon's answer")?),
    };
    Ok(answer)
}

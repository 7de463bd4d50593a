//! `check --online`'s HTTP probes of what `run` sends to: each alert receiver's origin (a `HEAD /`:
//! no event is sent, and neither the URL's path nor query, which may hold a token, nor the alert's
//! headers leave) and an OSV download URL (a `HEAD` of it, as the daemon's first download asks it).
//! What they print names the origin only (`redact_url`): never a path, query, header or token.

use std::time::Duration;

use super::Finding;
use builder_monitor::config::{AlertSettings, redact_url};

/// Whether the receiver of `alert` answers at its origin: any HTTP answer will do (a receiver
/// answers its own path only, often to POST only); no answer is a failure naming the alert.
pub async fn alert_receiver(entry: String, alert: &AlertSettings, within: Duration) -> Vec<Finding> {
    let Ok(url) = reqwest::Url::parse(alert.url.expose()) else {
        return vec![Finding::Failed(format!("{entry}: the URL does not parse — check url (or url_env)"))];
    };
    let origin = format!("{}/", url.origin().ascii_serialization());
    let shown = redact_url(alert.url.expose());
    let answer = match client(within, alert.insecure) {
        Ok(http) => http.head(&origin).send().await,
        Err(why) => return vec![Finding::Failed(format!("{entry}: {why}"))],
    };
    vec![match answer {
        Ok(response) => {
            Finding::Ok(format!("{entry}: {shown}: the host answers (HTTP {} to HEAD /)", response.status().as_u16()))
        }
        Err(error) => Finding::Failed(format!(
            "{entry}: {shown}: {} — check that its host and port are right and reachable",
            reason(&error)
        )),
    }]
}

/// Whether the OSV archive's URL answers a `HEAD` with a success (a redirect is said: the daemon
/// follows it only within the URL's origin).
pub async fn osv_url(entry: String, url: &str, within: Duration) -> Vec<Finding> {
    let shown = redact_url(url);
    let answer = match client(within, false) {
        Ok(http) => http.head(url).send().await,
        Err(why) => return vec![Finding::Failed(format!("{entry}: {why}"))],
    };
    vec![match answer {
        Ok(response) if response.status().is_success() => {
            let size = response.content_length().map(|n| format!(", {n} bytes")).unwrap_or_default();
            Finding::Ok(format!("{entry}: {shown}: there (HTTP {}{size})", response.status().as_u16()))
        }
        Ok(response) if response.status().is_redirection() => Finding::Note(format!(
            "{entry}: {shown}: HTTP {} (a redirect; the daemon follows one only within the URL's origin)",
            response.status().as_u16()
        )),
        Ok(response) => Finding::Failed(format!(
            "{entry}: {shown}: HTTP {} — check [vulnerabilities] osv (the archive's URL and any token it needs)",
            response.status().as_u16()
        )),
        Err(error) => Finding::Failed(format!(
            "{entry}: {shown}: {} — check that its host and port are right and reachable",
            reason(&error)
        )),
    }]
}

/// A client for one probe: no redirect followed, no `Referer`, the daemon's user agent.
fn client(within: Duration, insecure: bool) -> Result<reqwest::Client, String> {
    builder_monitor::install_crypto_provider();
    reqwest::Client::builder()
        .user_agent(builder_monitor::USER_AGENT)
        .timeout(within)
        .redirect(reqwest::redirect::Policy::none())
        .referer(false)
        .danger_accept_invalid_certs(insecure)
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {}", e.without_url()))
}

/// Why a request got no answer, in a phrase without its URL: the innermost cause (`Connection
/// refused`, `failed to lookup address information`), after what failed.
fn reason(error: &reqwest::Error) -> String {
    let what = if error.is_timeout() {
        "no answer in time"
    } else if error.is_connect() {
        "cannot connect"
    } else {
        "the request failed"
    };
    let mut cause: &dyn std::error::Error = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let cause = cause.to_string();
    // A cause that quotes a URL would show its path and query: only what failed is said then.
    if cause.is_empty() || cause.contains("://") {
        return what.to_string();
    }
    format!("{what}: {}", builder_monitor_core::text::fit(&cause, 80))
}

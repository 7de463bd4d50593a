//! The running daemon's API, for the commands that write the ledger (`deploy`, `rollback`, the
//! roll-out verdicts): while a daemon holds the ledger, it is the one writer, so they ask it.

use std::time::Duration;

use anyhow::Context;

use super::failure::{Failure, usage};
use builder_monitor::config::Config;

/// How long the daemon's API may take to answer.
const API_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends one request (`path` under `/api/v1/`) to the daemon that holds the ledger (`holder`), at
/// its `[server] listen` address, with the API token from `[server] api_token_env`; answers the
/// body of a success. A 4xx but 401, 403 and 409 is the caller's mistake (exit 2).
pub(super) async fn call_daemon(
    config: &Config,
    holder: &str,
    method: reqwest::Method,
    path: &str,
    body: serde_json::Value,
) -> Result<String, Failure> {
    let Some(server) = &config.server else {
        return Err(anyhow::anyhow!(
            "the daemon ({holder}) holds the ledger, and this config has no [server] to reach it through; \
             add [server] with api_token_env, or stop the daemon"
        )
        .into());
    };
    let Some(env) = &server.api_token_env else {
        return Err(anyhow::anyhow!(
            "the daemon ({holder}) holds the ledger; its API needs a token, and [server] names no api_token_env"
        )
        .into());
    };
    let token = std::env::var(env).map_err(|_| {
        anyhow::anyhow!("the daemon ({holder}) holds the ledger; set {env} to its API token to send this request to it")
    })?;
    // A daemon listening on every address answers on loopback too.
    let mut addr = server.listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() { [127, 0, 0, 1].into() } else { std::net::Ipv6Addr::LOCALHOST.into() });
    }
    let url = format!("http://{addr}/api/v1/{path}");
    let http = reqwest::Client::builder().timeout(API_TIMEOUT).build().context("setting up the HTTP client")?;
    let response = http
        .request(method, &url)
        .bearer_auth(token.trim())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await
        .with_context(|| format!("the daemon ({holder}) holds the ledger, and its API at {addr} did not answer"))?;
    let status = response.status();
    let text = response.text().await.context("reading the daemon's answer")?;
    if !status.is_success() {
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| builder_monitor_core::text::clip(&text, 300).into_owned());
        let error = anyhow::anyhow!("the daemon at {addr} answered HTTP {}: {message}", status.as_u16());
        // 409: the request was fine, the ledger's state refused it (as a direct write fails).
        return Err(if status.is_client_error() && ![401, 403, 409].contains(&status.as_u16()) {
            usage(error)
        } else {
            error.into()
        });
    }
    Ok(text)
}

/// A change id (or an image name) as one URL path segment.
pub(super) fn encode_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

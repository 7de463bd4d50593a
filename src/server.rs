//! The HTTP server: health and readiness probes, Prometheus metrics, the status API, and registry
//! push hooks that trigger an immediate check through the normal path. This module holds the
//! state and the routes; the handlers live by concern in its submodules.

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use governor::Quota;
use serde::Deserialize;
use serde_json::json;

use crate::config::{Config, ServerSettings};
use crate::ledger::Ledger;
use crate::monitor::MonitorHandle;

mod auth;
mod checks;
mod clients;
mod connections;
mod deploy;
mod payloads;
mod reads;
mod rollback;
mod rollout;

use auth::{REFUSAL_LOGS_PER_MINUTE, authorize, log_refusals};
pub use checks::hook_quota;
use clients::ClientLimiter;
pub use connections::{REQUEST_TIMEOUT, serve};

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 1 << 20;

pub struct ServerState {
    pub config: Arc<Config>,
    pub settings: ServerSettings,
    pub monitor: MonitorHandle,
    pub ledger: Ledger,
    hook_limiter: ClientLimiter,
    /// Refusal log lines per client address: a client sending wrong tokens in a loop must not
    /// flood the log (the `hooks_total{result="unauthorized"}` counter still counts every one).
    refusal_log_limiter: ClientLimiter,
    /// With leader election: whether this replica currently acts.
    leading: Option<tokio::sync::watch::Receiver<bool>>,
    /// The daemon's registry client (its push credentials), for rollbacks and for the tag a
    /// deploy by hand reads.
    registry: Option<Arc<crate::registry::Registry>>,
    /// The daemon's signing service: a rollback signs its target with it.
    signing: Option<Arc<crate::signing::SigningService>>,
    /// The OSV data in force (`[vulnerabilities]`): its age on `/readyz` and the page.
    pub vulns: Option<crate::vulns::Vulns>,
}

impl ServerState {
    pub fn new(config: Arc<Config>, settings: ServerSettings, monitor: MonitorHandle, ledger: Ledger) -> Self {
        let hook_limiter = clients::limiter(hook_quota(settings.hooks_per_second));
        let refusal_log_limiter = clients::limiter(Quota::per_minute(REFUSAL_LOGS_PER_MINUTE));
        ServerState {
            config,
            settings,
            monitor,
            ledger,
            hook_limiter,
            refusal_log_limiter,
            leading: None,
            registry: None,
            signing: None,
            vulns: None,
        }
    }

    /// Serves rollbacks too, writing through the daemon's registry client.
    pub fn with_vulns(mut self, vulns: Option<crate::vulns::Vulns>) -> Self {
        self.vulns = vulns;
        self
    }

    pub fn with_registry(mut self, registry: Arc<crate::registry::Registry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Signs what a rollback restores with the daemon's key (`[signing]`).
    pub fn with_signing(mut self, signing: Option<Arc<crate::signing::SigningService>>) -> Self {
        self.signing = signing;
        self
    }

    /// Serves as one of several replicas, acting only while `leading` says so.
    pub fn with_leadership(mut self, leading: tokio::sync::watch::Receiver<bool>) -> Self {
        self.leading = Some(leading);
        self
    }

    pub fn is_leader(&self) -> bool {
        self.leading.as_ref().is_none_or(|l| *l.borrow())
    }

    /// Forgets idle client addresses (see [`clients`]) and says how many each limiter keeps.
    fn forget_idle_clients(&self) {
        clients::forget_idle(&self.hook_limiter);
        clients::forget_idle(&self.refusal_log_limiter);
        self.count_clients();
    }

    /// `http_clients_tracked{limiter}`, brought up to date (at each sweep and scrape).
    fn count_clients(&self) {
        let metrics = self.monitor.metrics();
        for (limiter, keys) in [("hooks", self.hook_limiter.len()), ("refusal_log", self.refusal_log_limiter.len())] {
            let labels = crate::metrics::LimiterLabels { limiter: limiter.into() };
            metrics.http_clients_tracked.get_or_create(&labels).set(i64::try_from(keys).unwrap_or(i64::MAX));
        }
    }
}

/// Every answer of the server says so: no content sniffing (a JSON error or a hook's echo is never
/// run as HTML or script) and no `Referer` to wherever a link on the status page leads.
fn protect(headers: &mut HeaderMap) {
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, header::HeaderValue::from_static("no-referrer"));
}

/// What a standby answers requests that only the leader can act on.
fn standby() -> Response {
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "this replica is a standby; the leader runs checks (retry, or send it to the leader)",
    );
    response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    response
}

pub fn router(state: Arc<ServerState>) -> Router {
    let logging = state.clone();
    Router::new()
        .route("/", get(reads::page))
        .route("/healthz", get(reads::healthz))
        .route("/readyz", get(reads::readyz))
        .route("/metrics", get(reads::metrics))
        .route("/api/v1/builders", get(reads::builders))
        .route("/api/v1/builders/{name}", get(reads::builder))
        .route("/api/v1/builders/{name}/check", post(checks::check))
        .route("/api/v1/watches/{name}/check", post(checks::check))
        .route("/api/v1/changes", get(reads::changes))
        .route("/api/v1/changes/{id}/{verdict}", post(rollout::decide))
        .route("/api/v1/freeze", post(rollout::freeze).delete(rollout::unfreeze))
        .route("/api/v1/images/{name}/rollback", post(rollback::rollback))
        .route("/api/v1/images/{name}/deploy", post(deploy::deploy))
        .route("/hooks/{source}", post(checks::hook))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn(move |request, next| log_refusals(logging.clone(), request, next)))
        .with_state(state)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

/// The body of a request about one image's digest (`rollback`, `deploy`): `{"to": "sha256:…",
/// "by": "alice"}`, both optional, or none.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DigestBody {
    to: Option<String>,
    /// Who asks, recorded with the write (see [`requester`]).
    by: Option<String>,
}

/// Who an API write comes from, as recorded: the API token stands for whoever holds it, and a
/// name given in the body is recorded with it (`alice` → `alice (api)`; the command line's
/// `user@host (cli)` → `user@host (cli, through the api)`); `api` without one.
fn requester(by: Option<&str>) -> String {
    let Some(by) = by.map(str::trim).filter(|b| !b.is_empty()) else { return "api".into() };
    let by = builder_monitor_core::text::escape(&builder_monitor_core::text::clip(by, 120)).into_owned();
    match by.strip_suffix(" (cli)") {
        Some(user) => format!("{user} (cli, through the api)"),
        None => format!("{by} (api)"),
    }
}

/// A write request about one image's digest, authorized, on the leader, its body read: the
/// digest it names (`to`) and who asks, if given; otherwise the answer that refuses it.
async fn digest_request(
    state: &ServerState,
    headers: &HeaderMap,
    request: axum::extract::Request,
) -> Result<DigestBody, Response> {
    authorize(state, headers, None).map_err(IntoResponse::into_response)?;
    if !state.is_leader() {
        return Err(standby());
    }
    let body = read_body(request).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(DigestBody::default());
    }
    match serde_json::from_slice::<DigestBody>(&body) {
        Ok(b) => Ok(b),
        Err(e) => Err(error(StatusCode::BAD_REQUEST, format!("expected {{\"to\": \"sha256:…\"}} or no body: {e}"))),
    }
}

/// A write request's body, read once its token is accepted (see [`read_body`]), or the answer that
/// refuses it.
async fn authorized_body(
    state: &ServerState,
    headers: &HeaderMap,
    request: axum::extract::Request,
) -> Result<axum::body::Bytes, Response> {
    authorize(state, headers, None).map_err(IntoResponse::into_response)?;
    read_body(request).await
}

/// The request's body, read only now, once the token is checked: a client without the token can
/// neither make the server wait for a body nor have it buffer one. Over [`BODY_LIMIT`]: 413.
async fn read_body(request: axum::extract::Request) -> Result<axum::body::Bytes, Response> {
    use axum::extract::FromRequest;
    axum::body::Bytes::from_request(request, &()).await.map_err(IntoResponse::into_response)
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8], what: &str) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("not a {what} payload: {e}"))
}

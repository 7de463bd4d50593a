//! The HTTP server: health and readiness probes, Prometheus metrics, the status API, and registry
//! push hooks that trigger an immediate check through the normal path.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use governor::Quota;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ServerSettings};
use crate::ledger::{Ledger, Verdict};
use crate::metrics::HookLabels;
use crate::monitor::MonitorHandle;
use crate::rollout::{self, RolloutError};
use crate::status;

mod clients;
mod deploy;
mod payloads;
mod rollback;

use clients::ClientLimiter;
use payloads::{distribution_pushes, dockerhub_pushes, harbor_pushes};

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
        }
    }

    /// Serves rollbacks too, writing through the daemon's registry client.
    pub fn with_registry(mut self, registry: Arc<crate::registry::Registry>) -> Self {
        self.registry = Some(registry);
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

/// Forgets idle client addresses every [`clients::SWEEP_PERIOD`] until `shutdown`.
async fn sweep_clients(state: Arc<ServerState>, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(clients::SWEEP_PERIOD);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => state.forget_idle_clients(),
        }
    }
}

/// The per-client hook quota: `hooks_per_second`, bursts of twice that. The period goes through
/// `config::rate_period`, so no rate panics here (1e-30 once stopped the daemon at start).
pub fn hook_quota(hooks_per_second: f64) -> Quota {
    let burst = NonZeroU32::new((hooks_per_second.clamp(0.0, 1e6) * 2.0).ceil() as u32).unwrap_or(NonZeroU32::MIN);
    let period = crate::config::rate_period(hooks_per_second);
    Quota::with_period(period).unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN)).allow_burst(burst)
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
        .route("/", get(page))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/api/v1/builders", get(builders))
        .route("/api/v1/builders/{name}", get(builder))
        .route("/api/v1/builders/{name}/check", post(check))
        .route("/api/v1/watches/{name}/check", post(check))
        .route("/api/v1/changes", get(changes))
        .route("/api/v1/changes/{id}/{verdict}", post(decide))
        .route("/api/v1/freeze", post(freeze).delete(unfreeze))
        .route("/api/v1/images/{name}/rollback", post(rollback::rollback))
        .route("/api/v1/images/{name}/deploy", post(deploy::deploy))
        .route("/hooks/{source}", post(hook))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn(move |request, next| log_refusals(logging.clone(), request, next)))
        .with_state(state)
}

/// Refusal log lines per client address and minute (then quiet until the minute refills).
const REFUSAL_LOGS_PER_MINUTE: NonZeroU32 = NonZeroU32::new(10).unwrap();

/// Logs a WARN for every request refused for its token: the endpoint, the client and the reason,
/// so an operator sees a misconfigured hook. Only the path is logged: a hook's query carries the
/// token (`?token=`), and the token is never logged.
async fn log_refusals(
    state: Arc<ServerState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let client = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let (method, endpoint) = (request.method().clone(), request.uri().path().to_string());
    let response = next.run(request).await;
    if let Some(Refusal(reason)) = response.extensions().get::<Refusal>()
        && client.is_none_or(|c| state.refusal_log_limiter.check_key(&c.ip()).is_ok())
    {
        let client = client.map_or_else(|| "unknown".to_string(), |c| c.to_string());
        tracing::warn!(%method, endpoint, client, status = response.status().as_u16(), reason = *reason, "request refused");
    }
    response
}

/// Marks a response as a refusal, for [`log_refusals`].
#[derive(Clone, Copy)]
struct Refusal(&'static str);

/// How long a request (body and handler) may take once its head has arrived.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long shutdown waits for requests in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Open connections, in total and per client address. A connection over either cap is closed as
/// soon as it is accepted, so one client cannot hold every slot (or descriptor) and starve probes.
struct ConnectionSlots {
    total: Arc<tokio::sync::Semaphore>,
    capacity: u32,
    per_client: usize,
    by_client: std::sync::Mutex<std::collections::HashMap<IpAddr, usize>>,
}

/// One accepted connection's place in [`ConnectionSlots`], given back when it closes.
struct Slot {
    slots: Arc<ConnectionSlots>,
    client: IpAddr,
    _total: tokio::sync::OwnedSemaphorePermit,
}

impl ConnectionSlots {
    fn new(total: usize, per_client: usize) -> Arc<Self> {
        let capacity = u32::try_from(total).unwrap_or(u32::MAX).clamp(1, tokio::sync::Semaphore::MAX_PERMITS as u32);
        Arc::new(ConnectionSlots {
            total: Arc::new(tokio::sync::Semaphore::new(capacity as usize)),
            capacity,
            per_client: per_client.max(1),
            by_client: std::sync::Mutex::new(std::collections::HashMap::new()),
        })
    }

    fn acquire(self: &Arc<Self>, client: IpAddr) -> Option<Slot> {
        let mut by_client = self.by_client.lock().unwrap_or_else(|e| e.into_inner());
        let open = by_client.entry(client).or_insert(0);
        if *open >= self.per_client {
            return None;
        }
        let permit = self.total.clone().try_acquire_owned().ok()?;
        *open += 1;
        Some(Slot { slots: self.clone(), client, _total: permit })
    }

    /// Waits until every connection has closed, or `cap` has passed.
    async fn drained(&self, cap: Duration) {
        let _ = tokio::time::timeout(cap, self.total.acquire_many(self.capacity)).await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut by_client = self.slots.by_client.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(open) = by_client.get_mut(&self.client) {
            *open -= 1;
            if *open == 0 {
                by_client.remove(&self.client);
            }
        }
    }
}

/// Serves until `shutdown`, then drains requests in flight (for up to 10 s).
///
/// A connection must send a complete request head within `header_timeout` of connecting or of its
/// previous response (so the same timeout closes idle keep-alive connections); a request must
/// complete within [`REQUEST_TIMEOUT`]; connections beyond `max_connections` in total or
/// `max_connections_per_client` from one address are closed at once.
pub async fn serve(
    state: Arc<ServerState>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let settings = state.settings.clone();
    let slots = ConnectionSlots::new(settings.max_connections, settings.max_connections_per_client);
    tokio::spawn(sweep_clients(state.clone(), shutdown.clone()));
    let app = hyper_util::service::TowerToHyperService::new(router(state));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(settings.header_timeout);
    let mut refused_logged = false;
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors, or a connection reset before it was accepted: back off
                    // briefly instead of spinning.
                    tracing::warn!(error = %err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = slots.acquire(peer.ip()) else {
            if !refused_logged {
                tracing::warn!(client = %peer.ip(), "connection limit reached; closing new connections until some close");
                refused_logged = true;
            }
            drop(stream);
            continue;
        };
        refused_logged = false;
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let call = hyper::service::Service::call(&app, request);
            async move {
                let mut response = match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
                    Ok(Ok(response)) => response,
                    Ok(Err(never)) => match never {},
                    Err(_) => error(StatusCode::REQUEST_TIMEOUT, "the request took too long"),
                };
                // Here, around the router, so the 404s, 405s, 413s and 408s get them too.
                protect(response.headers_mut());
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(DRAIN_TIMEOUT, connection).await;
                }
            }
            drop(slot);
        });
    }
    slots.drained(DRAIN_TIMEOUT).await;
    Ok(())
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": message.into() }))).into_response()
}

/// Equal-length byte comparison whose time does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a request was refused.
struct Denied(StatusCode, &'static str);

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        let mut response = error(self.0, self.1);
        response.extensions_mut().insert(Refusal(self.1));
        response
    }
}

/// Checks `Authorization: Bearer <token>` (or, for hooks, `?token=`) against the API token.
fn authorize(state: &ServerState, headers: &HeaderMap, query_token: Option<&str>) -> Result<(), Denied> {
    let Some(expected) = &state.settings.api_token else {
        return Err(Denied(StatusCode::FORBIDDEN, "no API token is configured ([server] api_token_env)"));
    };
    // The auth scheme is case-insensitive (RFC 9110 section 11.1): `bearer` and `BEARER` too.
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match bearer.or(query_token) {
        Some(given) if constant_time_eq(given.as_bytes(), expected.expose().as_bytes()) => Ok(()),
        _ => Err(Denied(StatusCode::UNAUTHORIZED, "missing or wrong API token")),
    }
}

fn authorize_read(state: &ServerState, headers: &HeaderMap) -> Result<(), Denied> {
    if state.settings.public_read { Ok(()) } else { authorize(state, headers, None) }
}

async fn healthz(State(state): State<Arc<ServerState>>) -> Response {
    if state.monitor.alive() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        error(StatusCode::SERVICE_UNAVAILABLE, "the scheduler has not made progress recently")
    }
}

async fn readyz(State(state): State<Arc<ServerState>>) -> Response {
    let ledger = state.ledger.ping().await.is_ok();
    let first_cycle = state.monitor.first_cycle_done();
    let leader = state.is_leader();
    // A standby is ready (it serves reads and probes); only the replica acting waits for its first cycle.
    let ready = ledger && (first_cycle || !leader);
    // A registry outage leaves the daemon ready (a restart would not help), only degraded.
    let failing = state.monitor.failing_watches();
    let failing_total: usize = failing.values().sum();
    let body = json!({ "ready": ready, "config": true, "ledger": ledger, "first_check_cycle": first_cycle, "leader": leader,
        "degraded": failing_total > 0, "failing_watches": failing_total, "failing_by_registry": failing });
    let code = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, axum::Json(body)).into_response()
}

async fn metrics(State(state): State<Arc<ServerState>>) -> Response {
    state.count_clients();
    // Piece by piece: at 10,000 builders the whole text is ~4 MiB, a piece ~80 KiB.
    let pieces = state.monitor.metrics().exposition().map(Ok::<_, std::convert::Infallible>);
    let body = axum::body::Body::from_stream(futures::stream::iter(pieces));
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body).into_response()
}

async fn builders(State(state): State<Arc<ServerState>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize_read(&state, &headers) {
        return denied.into_response();
    }
    match status::collect(&state.config, &state.ledger, 10).await {
        Ok(report) => axum::Json(report.builders).into_response(),
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

async fn builder(State(state): State<Arc<ServerState>>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize_read(&state, &headers) {
        return denied.into_response();
    }
    match status::collect(&state.config, &state.ledger, 10).await {
        Ok(report) => match report.builders.into_iter().find(|b| b.name == name) {
            Some(b) => axum::Json(b).into_response(),
            None => error(StatusCode::NOT_FOUND, format!("no builder named \"{name}\"")),
        },
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

/// The status page; the read API's access rules apply.
async fn page(State(state): State<Arc<ServerState>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize_read(&state, &headers) {
        return denied.into_response();
    }
    match status::collect(&state.config, &state.ledger, 10).await {
        Ok(report) => (
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CONTENT_SECURITY_POLICY, crate::page::CONTENT_SECURITY_POLICY),
                (header::CACHE_CONTROL, "no-store"),
            ],
            crate::page::render(&report, &state.config, chrono::Utc::now()),
        )
            .into_response(),
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

#[derive(Deserialize)]
struct ChangesQuery {
    builder: Option<String>,
    limit: Option<usize>,
}

async fn changes(State(state): State<Arc<ServerState>>, Query(q): Query<ChangesQuery>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize_read(&state, &headers) {
        return denied.into_response();
    }
    let limit = q.limit.unwrap_or(50).clamp(1, 1000);
    match state.ledger.changes(q.builder.as_deref().filter(|b| !b.is_empty()), limit).await {
        Ok(changes) => axum::Json(changes).into_response(),
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

async fn check(State(state): State<Arc<ServerState>>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize(&state, &headers, None) {
        return denied.into_response();
    }
    if !state.is_leader() {
        return standby();
    }
    if state.monitor.check_now(&name) {
        (StatusCode::ACCEPTED, axum::Json(json!({ "checks": [name] }))).into_response()
    } else {
        error(StatusCode::NOT_FOUND, format!("no builder or run image watch named \"{name}\""))
    }
}

/// The body of a roll-out request; every field optional, and an empty body is none.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RolloutBody {
    /// `approve`/`reject`: one image's action only.
    image: Option<String>,
    /// `freeze`: shown by `status` and in `rollout.frozen`.
    reason: Option<String>,
    /// Who asks, recorded with the decision (`alice` → `alice (api)`).
    by: Option<String>,
}

impl RolloutBody {
    /// The body, or why it is refused (a 400).
    fn read(body: &[u8]) -> Result<Self, String> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(RolloutBody::default());
        }
        parse(body, "roll-out request")
    }

    /// The API token stands for whoever holds it; a name given in the body is recorded with it.
    fn by(&self) -> String {
        let Some(by) = self.by.as_deref().map(str::trim).filter(|b| !b.is_empty()) else { return "api".into() };
        let by = builder_monitor_core::text::escape(&builder_monitor_core::text::clip(by, 120)).into_owned();
        // The command line sends `user@host (cli)` when the daemon holds the ledger.
        match by.strip_suffix(" (cli)") {
            Some(user) => format!("{user} (cli, through the api)"),
            None => format!("{by} (api)"),
        }
    }
}

/// `POST /api/v1/changes/{id}/approve|reject|release`.
async fn decide(
    State(state): State<Arc<ServerState>>,
    Path((id, verdict)): Path<(String, String)>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    if let Err(denied) = authorize(&state, &headers, None) {
        return denied.into_response();
    }
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let verdict = match verdict.as_str() {
        "approve" => Verdict::Approve,
        "reject" => Verdict::Reject,
        "release" => Verdict::Release,
        _ => return error(StatusCode::NOT_FOUND, "expected /approve, /reject or /release"),
    };
    let body = match RolloutBody::read(&body) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    if verdict == Verdict::Release && body.image.is_some() {
        return error(StatusCode::BAD_REQUEST, "release lets a whole change go; it takes no image");
    }
    let now = state.monitor.now();
    match rollout::decide(&state.config, &state.ledger, &id, body.image.as_deref(), verdict, &body.by(), now).await {
        Ok(decision) => (StatusCode::OK, axum::Json(decision)).into_response(),
        Err(e @ RolloutError::UnknownChange(_)) => error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ RolloutError::UnknownImage { .. }) => error(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e) => {
            tracing::error!(error = %e, "cannot record a roll-out decision");
            error(StatusCode::INTERNAL_SERVER_ERROR, "cannot record the decision; see the daemon's log")
        }
    }
}

/// `POST /api/v1/freeze`.
async fn freeze(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    if let Err(denied) = authorize(&state, &headers, None) {
        return denied.into_response();
    }
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let body = match RolloutBody::read(&body) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let reason = body
        .reason
        .as_deref()
        .map(|r| builder_monitor_core::text::escape(r.trim()).into_owned())
        .filter(|r| !r.is_empty());
    freeze_response(rollout::freeze(&state.config, &state.ledger, reason, &body.by(), state.monitor.now()).await)
}

/// `DELETE /api/v1/freeze`.
async fn unfreeze(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    if let Err(denied) = authorize(&state, &headers, None) {
        return denied.into_response();
    }
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let body = match RolloutBody::read(&body) {
        Ok(b) => b,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    freeze_response(rollout::unfreeze(&state.config, &state.ledger, &body.by(), state.monitor.now()).await)
}

fn freeze_response(outcome: Result<rollout::FreezeOutcome, RolloutError>) -> Response {
    match outcome {
        Ok(outcome) => (StatusCode::OK, axum::Json(outcome)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot record the freeze");
            error(StatusCode::INTERNAL_SERVER_ERROR, "cannot record the freeze; see the daemon's log")
        }
    }
}

#[derive(Deserialize)]
struct HookQuery {
    token: Option<String>,
}

async fn hook(
    State(state): State<Arc<ServerState>>,
    Path(source): Path<String>,
    Query(q): Query<HookQuery>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let count = |result: &str| {
        state
            .monitor
            .metrics()
            .hooks
            .get_or_create(&HookLabels { source: source.clone(), result: result.into() })
            .inc();
    };
    if state.hook_limiter.check_key(&client.ip()).is_err() {
        count("rate_limited");
        return error(StatusCode::TOO_MANY_REQUESTS, "too many hook requests from this address");
    }
    if let Err(denied) = authorize(&state, &headers, q.token.as_deref()) {
        count("unauthorized");
        return denied.into_response();
    }
    if !state.is_leader() {
        count("standby");
        return standby();
    }
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refused) => {
            count("invalid");
            return refused;
        }
    };
    let pushed = match source.as_str() {
        "distribution" => distribution_pushes(&body),
        "dockerhub" => dockerhub_pushes(&body),
        "harbor" => harbor_pushes(&body),
        other => {
            count("unknown_source");
            return error(
                StatusCode::NOT_FOUND,
                format!("unknown hook source \"{other}\" (distribution, dockerhub, harbor)"),
            );
        }
    };
    let pushed = match pushed {
        Ok(p) => p,
        Err(message) => {
            count("invalid");
            return error(StatusCode::BAD_REQUEST, message);
        }
    };
    // The payload's digest is never trusted: a hook only schedules a normal check, and repeated
    // hooks for one tag coalesce into one pending wake-up.
    let mut checks: Vec<String> = Vec::new();
    for (registry, repository, tag) in &pushed {
        for name in state.monitor.check_matching(registry.as_deref(), repository, tag) {
            if !checks.contains(&name) {
                checks.push(name);
            }
        }
    }
    tracing::info!(source = %source, pushes = pushed.len(), checks = ?checks, "registry hook");
    count(if checks.is_empty() { "ignored" } else { "accepted" });
    (StatusCode::ACCEPTED, axum::Json(json!({ "checks": checks }))).into_response()
}

/// The request's body, read only now, once the token is checked: a client without the token can
/// neither make the server wait for a body nor have it buffer one. Over [`BODY_LIMIT`]: 413.
/// The body of a request about one image's digest (`rollback`, `deploy`): `{"to": "sha256:…"}`,
/// or none.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DigestBody {
    to: Option<String>,
}

/// A write request about one image's digest, authorized, on the leader, its body read: the
/// digest it names (`to`), if any; otherwise the answer that refuses it.
async fn digest_request(
    state: &ServerState,
    headers: &HeaderMap,
    request: axum::extract::Request,
) -> Result<Option<String>, Response> {
    authorize(state, headers, None).map_err(IntoResponse::into_response)?;
    if !state.is_leader() {
        return Err(standby());
    }
    let body = read_body(request).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match serde_json::from_slice::<DigestBody>(&body) {
        Ok(b) => Ok(b.to),
        Err(e) => Err(error(StatusCode::BAD_REQUEST, format!("expected {{\"to\": \"sha256:…\"}} or no body: {e}"))),
    }
}

async fn read_body(request: axum::extract::Request) -> Result<axum::body::Bytes, Response> {
    use axum::extract::FromRequest;
    axum::body::Bytes::from_request(request, &()).await.map_err(IntoResponse::into_response)
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8], what: &str) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("not a {what} payload: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abcdef", b"abcdef"));
        assert!(!constant_time_eq(b"abcdef", b"abcdeg"));
        assert!(!constant_time_eq(b"abc", b"abcdef"));
    }
}

//! What the server answers without changing anything: the probes, the metrics, the status API and
//! the status page.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::auth::authorize_read;
use super::{ServerState, error};
use crate::status;

pub(super) async fn healthz(State(state): State<Arc<ServerState>>) -> Response {
    if state.monitor.alive() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        error(StatusCode::SERVICE_UNAVAILABLE, "the scheduler has not made progress recently")
    }
}

pub(super) async fn readyz(State(state): State<Arc<ServerState>>) -> Response {
    let ledger = state.ledger.ping().await.is_ok();
    let first_cycle = state.monitor.first_cycle_done();
    let leader = state.is_leader();
    // A standby is ready (it serves reads and probes); only the replica acting waits for its first cycle.
    let ready = ledger && (first_cycle || !leader);
    // A registry outage leaves the daemon ready (a restart would not help), only degraded.
    let failing = state.monitor.failing_watches();
    let failing_total: usize = failing.values().sum();
    // So does a right the cluster refused: what needs it waits for it, the rest goes on.
    let missing_rights = crate::rights::missing();
    let degraded = failing_total > 0 || !missing_rights.is_empty();
    let mut body = json!({ "ready": ready, "config": true, "ledger": ledger, "first_check_cycle": first_cycle, "leader": leader,
        "degraded": degraded, "failing_watches": failing_total, "failing_by_registry": failing,
        "missing_rights": missing_rights });
    // Old vulnerability data leaves the daemon ready, and says so.
    if let Some(vulns) = &state.vulns {
        let (data, now) = (vulns.current(), chrono::Utc::now());
        let downloading = vulns.downloading();
        // A first download under way says so (a stalled one shows its bytes and since when).
        let note = data.stale_note(now).or_else(|| downloading.as_ref().filter(|d| d.first).map(|d| d.note()));
        body["vulnerability_data"] = json!({ "records": data.records, "releases": data.releases(),
            "age_seconds": data.age(now).map(|a| a.as_secs()),
            "refresh_failed": data.refresh_failed, "note": note, "downloading": downloading });
    }
    let code = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, axum::Json(body)).into_response()
}

pub(super) async fn metrics(State(state): State<Arc<ServerState>>) -> Response {
    state.count_clients();
    // Piece by piece: at 10,000 builders the whole text is ~4 MiB, a piece ~80 KiB.
    let pieces = state.monitor.metrics().exposition().map(Ok::<_, std::convert::Infallible>);
    let body = axum::body::Body::from_stream(futures::stream::iter(pieces));
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], body).into_response()
}

pub(super) async fn builders(State(state): State<Arc<ServerState>>, headers: HeaderMap) -> Response {
    if let Err(denied) = authorize_read(&state, &headers) {
        return denied.into_response();
    }
    match status::collect(&state.config, &state.ledger, 10).await {
        Ok(report) => axum::Json(report.builders).into_response(),
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

pub(super) async fn builder(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
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
pub(super) async fn page(State(state): State<Arc<ServerState>>, headers: HeaderMap) -> Response {
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
            {
                let now = chrono::Utc::now();
                let notes: Vec<String> = state.vulns.iter().filter_map(|v| v.current().stale_note(now)).collect();
                crate::page::render_noted(&report, &state.config, now, &notes)
            },
        )
            .into_response(),
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

#[derive(Deserialize)]
pub(super) struct ChangesQuery {
    builder: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn changes(
    State(state): State<Arc<ServerState>>,
    Query(q): Query<ChangesQuery>,
    headers: HeaderMap,
) -> Response {
    if let Err(denied) = authorize_read(&state, &headers) {
        return denied.into_response();
    }
    let limit = q.limit.unwrap_or(50).clamp(1, 1000);
    match state.ledger.changes(q.builder.as_deref().filter(|b| !b.is_empty()), limit).await {
        Ok(changes) => axum::Json(changes).into_response(),
        Err(err) => error(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
    }
}

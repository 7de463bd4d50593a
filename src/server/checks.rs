//! Checks on demand: `POST /api/v1/builders/{name}/check` and the registries' push hooks (whose
//! payloads `payloads` reads), each only scheduling a normal check on the leader.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use governor::Quota;
use serde::Deserialize;
use serde_json::json;

use super::auth::authorize;
use super::payloads::{distribution_pushes, dockerhub_pushes, harbor_pushes};
use super::{ServerState, error, read_body, standby};
use crate::metrics::HookLabels;

/// The per-client hook quota: `hooks_per_second`, bursts of twice that. The period goes through
/// `config::rate_period`, so no rate panics here (1e-30 once stopped the daemon at start).
pub fn hook_quota(hooks_per_second: f64) -> Quota {
    let burst = NonZeroU32::new((hooks_per_second.clamp(0.0, 1e6) * 2.0).ceil() as u32).unwrap_or(NonZeroU32::MIN);
    let period = crate::config::rate_period(hooks_per_second);
    Quota::with_period(period).unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN)).allow_burst(burst)
}

pub(super) async fn check(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
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

#[derive(Deserialize)]
pub(super) struct HookQuery {
    token: Option<String>,
}

pub(super) async fn hook(
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

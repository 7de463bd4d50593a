//! `POST /api/v1/images/{name}/rollback`: `rollback` through the running daemon, which holds the
//! ledger and the registry credentials, so a rollback needs no stop of the daemon.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{ServerState, authorize, error, read_body, standby};
use crate::rollback::{self, RollbackError};

/// The body: the digest to go back to (`--to`), or none for the one before the last move.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RollbackBody {
    to: Option<String>,
}

pub(super) async fn rollback(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    if let Err(denied) = authorize(&state, &headers, None) {
        return denied.into_response();
    }
    if !state.is_leader() {
        return standby();
    }
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let body: RollbackBody = if body.iter().all(u8::is_ascii_whitespace) {
        RollbackBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(b) => b,
            Err(e) => {
                return error(StatusCode::BAD_REQUEST, format!("expected {{\"to\": \"sha256:…\"}} or no body: {e}"));
            }
        }
    };
    let Some(registry) = &state.registry else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "this server has no registry client to write with");
    };
    let image = match rollback::configured_image(&state.config, &name) {
        Ok(image) => image,
        Err(e) => return error(StatusCode::NOT_FOUND, e.to_string()),
    };
    if let Some(to) = body.to.as_deref().filter(|d| !builder_monitor_core::reference::is_sha256_digest(d)) {
        return error(StatusCode::BAD_REQUEST, RollbackError::InvalidDigest(to.to_string()).to_string());
    }
    let now = state.monitor.now();
    match rollback::rollback(&state.config, &state.ledger, registry, image, body.to.as_deref(), now).await {
        Ok(done) => (StatusCode::OK, axum::Json(done)).into_response(),
        Err(
            e @ (RollbackError::NothingRecorded { .. }
            | RollbackError::NoPrevious { .. }
            | RollbackError::NotRecorded { .. }
            | RollbackError::InvalidDigest(_)),
        ) => error(StatusCode::CONFLICT, e.to_string()),
        Err(e) => {
            tracing::error!(image = %name, error = %e, "rollback through the API failed");
            error(StatusCode::BAD_GATEWAY, e.to_string())
        }
    }
}

//! `POST /api/v1/images/{name}/rollback`: `rollback` through the running daemon, which holds the
//! ledger and the registry credentials, so a rollback needs no stop of the daemon.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{ServerState, error};
use crate::rollback::{self, RollbackError};

pub(super) async fn rollback(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let (to, by) = match super::digest_request(&state, &headers, request).await {
        Ok(body) => (body.to, super::requester(body.by.as_deref())),
        Err(refused) => return refused,
    };
    let Some(registry) = &state.registry else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "this server has no registry client to write with");
    };
    let image = match rollback::configured_image(&state.config, &name) {
        Ok(image) => image,
        Err(e) => return error(StatusCode::NOT_FOUND, e.to_string()),
    };
    if let Some(to) = to.as_deref().filter(|d| builder_monitor_core::reference::DigestInput::parse(d).is_none()) {
        return error(StatusCode::BAD_REQUEST, RollbackError::InvalidDigest(to.to_string()).to_string());
    }
    let now = state.monitor.now();
    match rollback::rollback(
        &state.config,
        &state.ledger,
        registry,
        state.signing.as_deref(),
        image,
        to.as_deref(),
        &by,
        now,
    )
    .await
    {
        Ok(done) => (StatusCode::OK, axum::Json(done)).into_response(),
        Err(
            e @ (RollbackError::NothingRecorded { .. }
            | RollbackError::NoPrevious { .. }
            | RollbackError::NotRecorded { .. }
            | RollbackError::Prefix(_)
            | RollbackError::InvalidDigest(_)),
        ) => error(StatusCode::CONFLICT, e.to_string()),
        Err(e) => {
            tracing::error!(image = %name, error = %e, "rollback through the API failed");
            error(StatusCode::BAD_GATEWAY, e.to_string())
        }
    }
}

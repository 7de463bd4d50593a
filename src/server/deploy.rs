//! `POST /api/v1/images/{name}/deploy`: `deploy` through the running daemon, which holds the
//! ledger (and the registry client that reads the tag), so a deploy by hand needs no stop of it.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{ServerState, error};
use crate::deploy::{self, DeployError};

pub(super) async fn deploy(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let to = match super::digest_request(&state, &headers, request).await {
        Ok(body) => body.to,
        Err(refused) => return refused,
    };
    let to = to.as_deref();
    let image = match deploy::check(&state.config, &name, to) {
        Ok(image) => image,
        Err(e @ DeployError::UnknownImage { .. }) => return error(StatusCode::NOT_FOUND, e.to_string()),
        Err(e @ DeployError::InvalidDigest(_)) => return error(StatusCode::BAD_REQUEST, e.to_string()),
        Err(e) => return error(StatusCode::CONFLICT, e.to_string()),
    };
    let digest = match (to, &state.registry) {
        (Some(to), registry) => match deploy::resolve_to(Some(&state.ledger), registry.as_deref(), image, to).await {
            Ok(digest) => digest,
            Err(e) if e.is_usage() => return error(StatusCode::BAD_REQUEST, e.to_string()),
            Err(e) => return error(StatusCode::BAD_GATEWAY, e.to_string()),
        },
        (None, Some(registry)) => match deploy::tag_digest(registry, image).await {
            Ok(digest) => digest,
            Err(e @ DeployError::NoTag { .. }) => return error(StatusCode::CONFLICT, e.to_string()),
            Err(e) => return error(StatusCode::BAD_GATEWAY, e.to_string()),
        },
        (None, None) => {
            return error(StatusCode::SERVICE_UNAVAILABLE, "this server has no registry client to read the tag with");
        }
    };
    match deploy::record(&state.config, &state.ledger, image, &digest, state.monitor.now()).await {
        Ok(done) => (StatusCode::OK, axum::Json(done)).into_response(),
        Err(e) => {
            tracing::error!(image = %name, error = %e, "cannot record a deploy asked for through the API");
            error(StatusCode::INTERNAL_SERVER_ERROR, "cannot record the deploy; see the daemon's log")
        }
    }
}

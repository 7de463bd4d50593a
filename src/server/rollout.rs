//! `POST /api/v1/changes/{id}/approve|reject|release` and `POST`/`DELETE /api/v1/freeze`: a person's
//! roll-out requests through the running daemon, which holds the ledger.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{ServerState, authorized_body, error, parse, requester};
use crate::ledger::Verdict;
use crate::rollout::{self, RolloutError};

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

    /// Who asks, as recorded ([`requester`]).
    fn by(&self) -> String {
        requester(self.by.as_deref())
    }
}

/// `POST /api/v1/changes/{id}/approve|reject|release`.
pub(super) async fn decide(
    State(state): State<Arc<ServerState>>,
    Path((id, verdict)): Path<(String, String)>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let body = match authorized_body(&state, &headers, request).await {
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
pub(super) async fn freeze(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let body = match authorized_body(&state, &headers, request).await {
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
pub(super) async fn unfreeze(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let body = match authorized_body(&state, &headers, request).await {
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

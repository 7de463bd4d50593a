//! Who may ask: the API token (`Authorization: Bearer`, or `?token=` for hooks) compared in
//! constant time, the read API's `public_read`, and the WARN each refused request logs, limited
//! per client address.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{ServerState, error};

/// Equal-length byte comparison whose time does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a request was refused.
pub(super) struct Denied(StatusCode, &'static str);

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        let mut response = error(self.0, self.1);
        response.extensions_mut().insert(Refusal(self.1));
        response
    }
}

/// Checks `Authorization: Bearer <token>` (or, for hooks, `?token=`) against the API token.
pub(super) fn authorize(state: &ServerState, headers: &HeaderMap, query_token: Option<&str>) -> Result<(), Denied> {
    let Some(expected) = &state.settings.api_token else {
        return Err(Denied(
            StatusCode::FORBIDDEN,
            "this daemon started without an API token, so it refuses every write: set [server] api_token_env \
             in its config and that variable in its environment, then restart it",
        ));
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

pub(super) fn authorize_read(state: &ServerState, headers: &HeaderMap) -> Result<(), Denied> {
    if state.settings.public_read { Ok(()) } else { authorize(state, headers, None) }
}

/// Refusal log lines per client address and minute (then quiet until the minute refills).
pub(super) const REFUSAL_LOGS_PER_MINUTE: NonZeroU32 = NonZeroU32::new(10).unwrap();

/// Logs a WARN for every request refused for its token: the endpoint, the client and the reason,
/// so an operator sees a misconfigured hook. Only the path is logged: a hook's query carries the
/// token (`?token=`), and the token is never logged.
pub(super) async fn log_refusals(
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

//! Serving connections: the accept loop, the caps on open connections in total and per client,
//! the timeouts on a request's head and on the whole request, the sweep of idle client addresses,
//! and the drain at shutdown.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use tokio_util::sync::CancellationToken;

use super::{ServerState, clients, error, protect, router};

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

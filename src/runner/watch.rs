//! What a pool's client hears of its cluster ([`Health`]), the objects of one kind the runner
//! made there, kept current by a watch ([`Watched`]), and the settings of every watch the daemon
//! makes ([`settings`]): bookmarks asked for, and a server-side timeout after which the watch is
//! resumed from where it was.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::objects::SELECTOR;
pub use crate::config::unanswered;

/// Requests in a row that got no answer before a pool counts as down.
const DOWN_AFTER: u32 = 2;

/// What a pool's client hears of its cluster: down after [`DOWN_AFTER`] unanswered requests in a
/// row, up again at the first answer (the watch keeps trying with backoff). Each edge is logged
/// once.
#[derive(Debug, Default)]
pub struct Health {
    pool: String,
    unanswered: AtomicU32,
}

impl Health {
    pub fn new(pool: &str) -> Self {
        Health { pool: pool.to_string(), unanswered: AtomicU32::new(0) }
    }

    pub fn answered(&self) {
        if self.unanswered.swap(0, Ordering::Relaxed) >= DOWN_AFTER {
            tracing::info!(pool = %self.pool, "the pool's cluster answers again; builds go to it");
        }
    }

    pub fn unanswered(&self, error: &str) {
        if self.unanswered.fetch_add(1, Ordering::Relaxed) + 1 == DOWN_AFTER {
            tracing::warn!(pool = %self.pool, error, "the pool's cluster does not answer; its builds go to the next pool serving their platform");
        }
    }

    pub fn answers(&self) -> bool {
        self.unanswered.load(Ordering::Relaxed) < DOWN_AFTER
    }
}

/// How long the daemon asks the server to keep a watch open (`timeoutSeconds`): the server ends
/// it then, and the watch goes on from the last resourceVersion it saw. Under the apiserver's
/// `--min-request-timeout` (1800 s by default, which it would randomise up to twice), so the
/// daemon, not the server's chance, says when; and so a connection that died without a word
/// (a proxy, a NAT) is noticed within this time and a few seconds.
pub const SERVER_TIMEOUT: Duration = Duration::from_secs(290);

/// The settings of every watch the daemon makes ([`settings_ending_after`] at
/// [`SERVER_TIMEOUT`]).
pub fn settings() -> watcher::Config {
    settings_ending_after(SERVER_TIMEOUT)
}

/// A watch that asks for bookmarks (`allowWatchBookmarks=true`) and for the server to end it
/// after `timeout` (`timeoutSeconds`, at least 1 s). The watcher ([`kube::runtime::watcher`])
/// keeps the resourceVersion of the last event or BOOKMARK it received and resumes from it when
/// the server ends the watch, so a watch of quiet objects resumes from the bookmark's recent
/// version, not the old one of its last event (which etcd may have compacted: 410 Gone, and a
/// full list again). A 410 still lists again, and the list's `Init`…`InitDone` tells what went.
pub fn settings_ending_after(timeout: Duration) -> watcher::Config {
    let seconds = u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX).max(1);
    let mut config = watcher::Config::default().timeout(seconds);
    config.bookmarks = true;
    config
}

/// [`unanswered`] for a watch's errors.
pub fn unanswered_watch(err: &kube::runtime::watcher::Error) -> bool {
    use kube::runtime::watcher::Error;
    match err {
        Error::InitialListFailed(e) | Error::WatchStartFailed(e) | Error::WatchFailed(e) => unanswered(e),
        _ => false,
    }
}

/// The objects of one kind the runner made, kept current by a watch on the managed-by label.
pub struct Watched {
    objects: Mutex<HashMap<String, Value>>,
    changed: Notify,
}

impl Watched {
    /// Starts watching `api` until `stop` with the daemon's [`settings`]; what the watch hears (or
    /// not) of the cluster goes to `health`.
    pub fn start<K>(api: Api<K>, health: Arc<Health>, stop: CancellationToken) -> Arc<Self>
    where
        K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug + Send + 'static,
    {
        Self::start_with(api, settings(), health, stop)
    }

    /// [`Watched::start`] with other watch settings (a shorter server timeout, in tests); the
    /// managed-by selector is added to them.
    pub fn start_with<K>(
        api: Api<K>,
        settings: watcher::Config,
        health: Arc<Health>,
        stop: CancellationToken,
    ) -> Arc<Self>
    where
        K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug + Send + 'static,
    {
        let watched = Arc::new(Watched { objects: Mutex::new(HashMap::new()), changed: Notify::new() });
        let w = watched.clone();
        tokio::spawn(async move {
            let mut events = watcher(api, settings.labels(SELECTOR)).default_backoff().boxed();
            // The names a (re-)list has delivered so far: a watch that cannot resume (410 Gone
            // after etcd compacted its resourceVersion) lists again, and what that list lacks
            // was deleted meanwhile — its delete event is never sent.
            let mut listed: Option<HashSet<String>> = None;
            loop {
                let event = tokio::select! {
                    _ = stop.cancelled() => break,
                    e = events.next() => e,
                };
                match &event {
                    Some(Ok(_)) => health.answered(),
                    Some(Err(err)) if unanswered_watch(err) => health.unanswered(&err.to_string()),
                    _ => {}
                }
                match event {
                    Some(Ok(watcher::Event::Init)) => listed = Some(HashSet::new()),
                    Some(Ok(watcher::Event::InitDone)) => {
                        let names = listed.take().unwrap_or_default();
                        w.objects.lock().unwrap_or_else(|e| e.into_inner()).retain(|name, _| names.contains(name));
                    }
                    Some(Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                        if let (Some(name), Ok(v)) = (o.meta().name.clone(), serde_json::to_value(&o)) {
                            if let Some(names) = listed.as_mut() {
                                names.insert(name.clone());
                            }
                            w.objects.lock().unwrap_or_else(|e| e.into_inner()).insert(name, v);
                        }
                    }
                    Some(Ok(watcher::Event::Delete(o))) => {
                        if let Some(name) = o.meta().name.clone() {
                            w.objects.lock().unwrap_or_else(|e| e.into_inner()).remove(&name);
                        }
                    }
                    // A cluster that does not answer is logged by its health, once per outage.
                    Some(Err(err)) if unanswered_watch(&err) => {
                        tracing::debug!(error = %err, "watch of build objects failed; retrying")
                    }
                    Some(Err(err)) => tracing::warn!(error = %err, "watch of build objects failed; retrying"),
                    None => break,
                }
                w.changed.notify_waiters();
            }
        });
        watched
    }

    /// Waits until `seen` finds what it waits for among the objects (name → object).
    pub async fn wait_all<T>(&self, seen: impl Fn(&HashMap<String, Value>) -> Option<T>) -> T {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(result) = seen(&self.objects.lock().unwrap_or_else(|e| e.into_inner())) {
                return result;
            }
            notified.await;
        }
    }

    /// Waits until `seen` finds what it waits for in the object `name`.
    pub async fn wait<T>(&self, name: &str, seen: impl Fn(&Value) -> Option<T>) -> T {
        self.wait_all(|objects| objects.get(name).and_then(&seen)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_watch_asks_for_bookmarks_and_a_server_timeout() {
        let daemon = settings();
        assert!(daemon.bookmarks);
        assert_eq!(daemon.timeout, Some(290));
        let short = settings_ending_after(Duration::from_millis(5_500));
        assert_eq!((short.bookmarks, short.timeout), (true, Some(5)));
        assert_eq!(settings_ending_after(Duration::ZERO).timeout, Some(1), "0 would turn the timeout off");
    }
}

//! One LIST of the ledger's ConfigMaps shared by the reads of a daemon's start (issue 64 goal 5).
//!
//! A start reads every family of the ledger (running actions to recover, pins to check, due
//! deliveries, open actions, the freeze…), and each of those reads is a LIST carrying every
//! entry: ten reads of the whole ledger. While the start's sharing is open
//! ([`KubeLedger::share_start_list`]), the first LIST is kept and answers the reads after it.
//!
//! What a shared read may miss: another process's write (a replica, the command line) made after
//! the kept LIST — as if that write had come a little later; never this ledger's own: its first
//! write ends the sharing before it is sent, so every read after it lists again. The sharing also
//! ends when the start does ([`KubeLedger::end_start_list`], when every builder has been checked
//! once), and at the latest [`AT_MOST`] after the LIST was made, so a read is never older than
//! that.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{KubeLedger, LedgerError, WatchDoc};
use k8s_openapi::api::core::v1::ConfigMap;

/// Every entry of the ledger: its ConfigMap and what it holds.
pub(super) type Entries = Vec<(ConfigMap, WatchDoc)>;

/// The longest a kept LIST answers reads, however long the start takes.
const AT_MOST: Duration = Duration::from_secs(30);

/// Whether reads share a LIST now, and the one kept.
#[derive(Default)]
pub(super) struct StartList {
    state: Mutex<State>,
    /// Held while the LIST to keep is made, so the reads that come meanwhile wait for it instead
    /// of making their own.
    listing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
enum State {
    /// Every read lists (the command line's ledger; the daemon's after its start).
    #[default]
    Off,
    /// The next read's LIST is kept. `term` tells a sharing from the one before it, so a LIST
    /// made for an ended sharing is not kept.
    Open {
        term: u64,
    },
    Kept {
        at: Instant,
        entries: Arc<Entries>,
    },
}

impl StartList {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn open(&self) {
        let mut state = self.lock();
        if let State::Off = *state {
            *state = State::Open { term: next_term() };
        }
    }

    fn end(&self) {
        *self.lock() = State::Off;
    }

    /// The kept LIST, while it may still answer.
    fn kept(&self) -> Option<Arc<Entries>> {
        let mut state = self.lock();
        match &*state {
            State::Kept { at, entries } if at.elapsed() <= AT_MOST => Some(entries.clone()),
            State::Kept { .. } => {
                *state = State::Off;
                None
            }
            _ => None,
        }
    }

    fn open_term(&self) -> Option<u64> {
        match *self.lock() {
            State::Open { term } => Some(term),
            _ => None,
        }
    }

    /// Keeps `entries`, listed for `term`, if that sharing is still open.
    fn keep(&self, term: u64, entries: Arc<Entries>) {
        let mut state = self.lock();
        if matches!(*state, State::Open { term: open } if open == term) {
            *state = State::Kept { at: Instant::now(), entries };
        }
    }
}

/// A number no sharing had before, so a LIST made for an ended one is never kept for the next.
fn next_term() -> u64 {
    static TERMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    TERMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl KubeLedger {
    /// Opens the start's sharing: the next LIST of the ledger answers the reads after it too,
    /// until [`KubeLedger::end_start_list`], this ledger's first write or [`AT_MOST`].
    pub fn share_start_list(&self) {
        self.start_list.open();
    }

    /// Ends the start's sharing: every read lists again.
    pub fn end_start_list(&self) {
        self.start_list.end();
    }

    /// Every entry of the ledger: the kept LIST while the start's sharing is open, else a LIST.
    pub(super) async fn entries(&self) -> Result<Entries, LedgerError> {
        let shared = &self.start_list;
        if let Some(entries) = shared.kept() {
            return Ok(entries.as_ref().clone());
        }
        if shared.open_term().is_none() {
            return self.list().await;
        }
        let _listing = shared.listing.lock().await;
        if let Some(entries) = shared.kept() {
            return Ok(entries.as_ref().clone());
        }
        let Some(term) = shared.open_term() else {
            return self.list().await;
        };
        // A failed LIST is this read's error; the next read tries its own.
        let entries = self.list().await?;
        shared.keep(term, Arc::new(entries.clone()));
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Arc<Entries> {
        Arc::new(vec![(ConfigMap::default(), WatchDoc::default())])
    }

    #[test]
    fn a_list_is_kept_only_for_the_open_sharing() {
        let shared = StartList::default();
        assert!(shared.open_term().is_none(), "off until opened");
        shared.open();
        let term = shared.open_term().unwrap();
        shared.end();
        shared.open();
        shared.keep(term, entries());
        assert!(shared.kept().is_none(), "a LIST made for an ended sharing is not kept");
        let term = shared.open_term().unwrap();
        shared.keep(term, entries());
        assert_eq!(shared.kept().unwrap().len(), 1);
        shared.open();
        assert!(shared.kept().is_some(), "opening again keeps what is kept");
        shared.end();
        assert!(shared.kept().is_none() && shared.open_term().is_none(), "ended: every read lists");
    }
}

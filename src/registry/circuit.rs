//! A per-registry circuit breaker: after `THRESHOLD` consecutive requests that got no answer
//! (connection failures, timeouts), requests fail at once, except one probe at a time. Opening and
//! closing are logged at DEBUG: the checks that fail meanwhile make the monitor log the registry's
//! outage (`monitor::failure_log`).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Consecutive unanswered requests that open the circuit.
pub const THRESHOLD: u32 = 5;

#[derive(Debug, Default)]
pub struct Circuit {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Unanswered requests in a row.
    failures: u32,
    /// Set while open: since when.
    open_since: Option<Instant>,
    probing: bool,
}

/// Why a request was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    pub failures: u32,
    pub since: Duration,
}

/// Leave to send one request; report its fate with `answered` or `unanswered`. Dropped unreported
/// (the check was cancelled), a probe frees the probe slot.
#[must_use]
pub struct Pass<'a> {
    circuit: &'a Circuit,
    probe: bool,
    reported: bool,
}

impl Circuit {
    /// A pass for one request, or why the registry is not asked now.
    pub fn admit(&self) -> Result<Pass<'_>, Open> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(since) = state.open_since else {
            return Ok(Pass { circuit: self, probe: false, reported: false });
        };
        if state.probing {
            return Err(Open { failures: state.failures, since: since.elapsed() });
        }
        state.probing = true;
        Ok(Pass { circuit: self, probe: true, reported: false })
    }

    pub fn is_open(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).open_since.is_some()
    }
}

impl Pass<'_> {
    /// The registry answered (any HTTP status): the circuit closes.
    pub fn answered(mut self, registry: &str) {
        self.reported = true;
        let mut state = self.circuit.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = state.open_since.take() {
            // DEBUG: the monitor logs the outage of a registry whose checks fail (`monitor::failure_log`).
            tracing::debug!(registry, after = ?since.elapsed(), "registry answers again; circuit closed");
        }
        *state = State::default();
    }

    /// No answer (connection failure, timeout, reset): counts towards opening the circuit.
    pub fn unanswered(mut self, registry: &str) {
        self.reported = true;
        let mut state = self.circuit.state.lock().unwrap_or_else(|e| e.into_inner());
        state.failures = state.failures.saturating_add(1);
        if self.probe {
            state.probing = false;
        }
        if state.open_since.is_none() && state.failures >= THRESHOLD {
            state.open_since = Some(Instant::now());
            tracing::debug!(
                registry,
                failures = state.failures,
                "registry does not answer; circuit open: its checks fail fast, one probe at a time"
            );
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if self.probe && !self.reported {
            self.circuit.state.lock().unwrap_or_else(|e| e.into_inner()).probing = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_and_probes_one_at_a_time() {
        let c = Circuit::default();
        for _ in 0..THRESHOLD - 1 {
            c.admit().unwrap().unanswered("r");
        }
        assert!(!c.is_open());
        // An answer in between starts the count over.
        c.admit().unwrap().answered("r");
        for _ in 0..THRESHOLD {
            c.admit().unwrap().unanswered("r");
        }
        assert!(c.is_open());
        let probe = c.admit().unwrap();
        assert_eq!(c.admit().err().map(|o| o.failures), Some(THRESHOLD));
        probe.unanswered("r");
        assert!(c.is_open());
        let probe = c.admit().unwrap();
        assert!(c.admit().is_err());
        probe.answered("r");
        assert!(!c.is_open());
        let (a, b) = (c.admit().unwrap(), c.admit().unwrap());
        a.answered("r");
        b.answered("r");
    }

    #[test]
    fn a_cancelled_probe_frees_the_probe_slot() {
        let c = Circuit::default();
        for _ in 0..THRESHOLD {
            c.admit().unwrap().unanswered("r");
        }
        drop(c.admit().unwrap());
        assert!(c.admit().is_ok(), "another probe may go");
    }
}

//! The one worker loop of the runner, the alert outbox and the ClusterBuilder publisher: start what
//! is due, wait for the next due time, a wake, a finished task or shutdown; at shutdown, a grace.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What a worker does on each turn of [`run`].
pub trait Work: Send {
    /// Starts what is due now (long work as tasks on `tasks`: a task's end ends the wait, as it
    /// may free a slot) and answers how long until more falls due; `None`: nothing until a wake.
    fn start_due(&mut self, tasks: &mut JoinSet<()>) -> impl Future<Output = Option<Duration>> + Send;

    /// Resolves once new work was announced. Must be cancel-safe, and an announcement made while
    /// the worker was busy must resolve the next call at once, so no wake is lost.
    fn woken(&mut self) -> impl Future<Output = ()> + Send;
}

/// Runs `work` until `shutdown`. Tasks still running then get `grace` to finish; after it they
/// are aborted, and dropped before this returns (a dropped runner task kills its command).
pub async fn run(mut work: impl Work, shutdown: CancellationToken, grace: Duration) {
    let mut tasks = JoinSet::new();
    loop {
        let due_in = work.start_due(&mut tasks).await;
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            _ = work.woken() => {}
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = tokio::time::sleep(due_in.unwrap_or_default()), if due_in.is_some() => {}
        }
    }
    if tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await.is_err() {
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio::sync::{Notify, mpsc};

    use super::*;

    /// A worker over an in-memory queue: each item is a task that takes its `Duration` (in paused
    /// time) and then reports its number on `done`.
    struct Queue {
        items: Arc<Mutex<VecDeque<(u32, Duration)>>>,
        wake: Arc<Notify>,
        done: mpsc::UnboundedSender<u32>,
        /// Tasks at most in flight at once.
        slots: usize,
        /// How long until the queue is looked at again without a wake.
        due_in: Option<Duration>,
        /// Turns taken so far.
        turns: Arc<AtomicUsize>,
        /// While set, the turn waits for this after it took what was queued (slow work).
        gate: Option<Arc<Notify>>,
    }

    /// Reports its number when dropped unfinished (an aborted task).
    struct Dropped(u32, mpsc::UnboundedSender<u32>, bool);

    impl Drop for Dropped {
        fn drop(&mut self) {
            if !self.2 {
                let _ = self.1.send(1000 + self.0);
            }
        }
    }

    impl Work for Queue {
        async fn start_due(&mut self, tasks: &mut JoinSet<()>) -> Option<Duration> {
            self.turns.fetch_add(1, Ordering::SeqCst);
            while tasks.len() < self.slots {
                let Some((n, takes)) = self.items.lock().unwrap().pop_front() else { break };
                let done = self.done.clone();
                tasks.spawn(async move {
                    let mut guard = Dropped(n, done.clone(), false);
                    tokio::time::sleep(takes).await;
                    guard.2 = true;
                    let _ = done.send(n);
                });
            }
            if let Some(gate) = self.gate.take() {
                gate.notified().await;
            }
            self.due_in
        }

        async fn woken(&mut self) {
            self.wake.notified().await
        }
    }

    struct Harness {
        items: Arc<Mutex<VecDeque<(u32, Duration)>>>,
        wake: Arc<Notify>,
        done: mpsc::UnboundedReceiver<u32>,
        turns: Arc<AtomicUsize>,
        shutdown: CancellationToken,
    }

    impl Harness {
        fn push(&self, n: u32, takes: Duration) {
            self.items.lock().unwrap().push_back((n, takes));
        }

        /// The next report, or `None` once nothing can happen any more before an hour passes.
        async fn next_done(&mut self) -> Option<u32> {
            tokio::time::timeout(Duration::from_secs(3600), self.done.recv()).await.ok().flatten()
        }
    }

    fn start(
        slots: usize,
        due_in: Option<Duration>,
        gate: Option<Arc<Notify>>,
        grace: Duration,
    ) -> (Harness, tokio::task::JoinHandle<()>) {
        let (done_tx, done) = mpsc::unbounded_channel();
        let items = Arc::new(Mutex::new(VecDeque::new()));
        let wake = Arc::new(Notify::new());
        let turns = Arc::new(AtomicUsize::new(0));
        let shutdown = CancellationToken::new();
        let queue = Queue {
            items: items.clone(),
            wake: wake.clone(),
            done: done_tx,
            slots,
            due_in,
            turns: turns.clone(),
            gate,
        };
        let handle = tokio::spawn(run(queue, shutdown.clone(), grace));
        (Harness { items, wake, done, turns, shutdown }, handle)
    }

    const GRACE: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_wake_runs_the_work_that_is_due() {
        let (mut h, handle) = start(4, None, None, GRACE);
        // The first turn has looked at the (empty) queue once it is counted.
        while h.turns.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        h.push(1, Duration::ZERO);
        h.wake.notify_one();
        assert_eq!(h.next_done().await, Some(1));
        h.push(2, Duration::ZERO);
        h.push(3, Duration::ZERO);
        h.wake.notify_one();
        let mut got = [h.next_done().await, h.next_done().await];
        got.sort();
        assert_eq!(got, [Some(2), Some(3)]);
        // Without a wake or a due time, new work waits.
        h.push(4, Duration::ZERO);
        assert_eq!(h.next_done().await, None, "an hour passed: nothing ran unannounced");
        h.shutdown.cancel();
        handle.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_while_the_worker_is_busy_is_not_lost() {
        let gate = Arc::new(Notify::new());
        let (mut h, handle) = start(4, None, Some(gate.clone()), GRACE);
        // The first turn took the (empty) queue and is still busy when the work and its wake arrive.
        while h.turns.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        h.push(1, Duration::ZERO);
        h.wake.notify_one();
        gate.notify_one();
        // No due time: only that wake can bring the next turn.
        assert_eq!(h.next_done().await, Some(1), "the wake during the turn was lost");
        h.shutdown.cancel();
        handle.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn work_falls_due_without_a_wake_and_a_finished_task_frees_its_slot() {
        let (mut h, handle) = start(1, Some(Duration::from_secs(60)), None, GRACE);
        while h.turns.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let before = tokio::time::Instant::now();
        h.push(1, Duration::from_secs(5));
        h.push(2, Duration::ZERO);
        // No wake: the due time brings 1; its end (one slot) brings 2 at once, not a minute later.
        assert_eq!(h.next_done().await, Some(1));
        assert_eq!(h.next_done().await, Some(2));
        let took = before.elapsed();
        assert!(took >= Duration::from_secs(65) && took < Duration::from_secs(66), "{took:?}");
        h.shutdown.cancel();
        handle.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_the_loop() {
        let (h, handle) = start(4, Some(Duration::from_secs(1)), None, GRACE);
        while h.turns.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        h.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(60), handle).await.expect("the loop stopped").unwrap();
        let turns = h.turns.load(Ordering::SeqCst);
        h.push(1, Duration::ZERO);
        h.wake.notify_one();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(h.turns.load(Ordering::SeqCst), turns, "a turn after shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn work_in_flight_gets_its_grace_and_is_dropped_after_it() {
        let (mut h, handle) = start(4, None, None, GRACE);
        h.push(1, Duration::from_secs(5));
        h.push(2, Duration::from_secs(60));
        h.wake.notify_one();
        while !h.items.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let stopped = tokio::time::Instant::now();
        h.shutdown.cancel();
        handle.await.unwrap();
        assert_eq!(stopped.elapsed(), GRACE, "the loop waited out the grace, no longer");
        // 1 finished within the grace; 2 was aborted, and dropped before `run` returned.
        assert_eq!(h.done.try_recv().ok(), Some(1));
        assert_eq!(h.done.try_recv().ok(), Some(1002));
        assert!(h.done.try_recv().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_with_nothing_in_flight_returns_at_once() {
        let (h, handle) = start(4, None, None, GRACE);
        let stopped = tokio::time::Instant::now();
        h.shutdown.cancel();
        handle.await.unwrap();
        assert_eq!(stopped.elapsed(), Duration::ZERO);
    }
}

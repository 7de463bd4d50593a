//! The process's log stream: every log line (and the command's last error) goes to stderr through
//! a bounded queue and one writer thread, so a slow, full or closed stderr never blocks or panics a
//! task. A line that finds the queue full, or whose write fails (`EPIPE` once the reader is gone:
//! Rust ignores `SIGPIPE`), is dropped and counted in `builder_monitor_log_lines_dropped_total`.
//!
//! Written by hand rather than with `tracing-appender`'s lossy `non_blocking`: that counts only the
//! lines a full channel refuses, not those lost to write errors, and its worker `eprintln!`s (and
//! so panics) when a flush fails; what it would add over `std`'s `Mutex` and `Condvar` is the ~100
//! lines below, for one more crate (and crossbeam) to build.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

/// Bytes queued for the writer (and in its hands) beyond which new lines are dropped. A line
/// bigger than this is still taken when the queue is empty, so memory stays under this or one line.
pub const QUEUE_BYTES: usize = 1 << 20;

/// How long the process waits at exit (and after a panic) for queued lines to be written.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Lines dropped, process-wide: logging is process-wide, and the daemon's metrics registry
/// serves this counter (see [`dropped_lines`]).
static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// The stream [`init`] started, for [`line`].
static STREAM: OnceLock<LogStream> = OnceLock::new();

/// The counter of dropped lines, to register in a metrics registry (a clone shares the count).
pub fn dropped_lines() -> Counter {
    DROPPED.clone()
}

/// A handle to the queue; clones share it.
#[derive(Clone)]
pub struct LogStream {
    shared: Arc<Shared>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Lines are waiting: wakes the writer.
    queued: Condvar,
    /// The writer finished a batch: wakes flushers.
    written: Condvar,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Vec<u8>>,
    /// Bytes of the queued lines and of the batch the writer is writing.
    bytes: usize,
    /// Lines accepted so far, and lines the writer is done with (written or dropped).
    accepted: u64,
    done: u64,
}

impl LogStream {
    /// Starts the writer thread over `out` (stderr for the process).
    pub fn start(out: impl Write + Send + 'static) -> std::io::Result<Self> {
        let shared = Arc::new(Shared { queue: Mutex::default(), queued: Condvar::new(), written: Condvar::new() });
        let writer = shared.clone();
        std::thread::Builder::new().name("log-writer".into()).spawn(move || writer.write_forever(out))?;
        Ok(LogStream { shared })
    }

    /// Queues `bytes` (a whole line), or drops and counts it when the queue is full. Never blocks
    /// on the output and never fails.
    pub fn line(&self, bytes: &[u8]) {
        let mut queue = self.shared.lock();
        if queue.bytes > 0 && queue.bytes + bytes.len() > QUEUE_BYTES {
            drop(queue);
            DROPPED.inc();
            return;
        }
        queue.bytes += bytes.len();
        queue.accepted += 1;
        queue.lines.push_back(bytes.to_vec());
        drop(queue);
        self.shared.queued.notify_one();
    }

    /// Waits until every line queued so far is written (or dropped), for at most `within`: a full
    /// pipe that nobody reads must not hold the process. True when all were.
    pub fn flush(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut queue = self.shared.lock();
        let target = queue.accepted;
        while queue.done < target {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            queue = self.shared.written.wait_timeout(queue, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }
}

impl Shared {
    /// A poisoned lock only means a thread panicked while holding it; the counters stay usable.
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The writer thread: takes every queued line at once, writes them outside the lock (a
    /// blocked write holds no producer), and counts the ones that fail.
    fn write_forever(&self, mut out: impl Write) {
        loop {
            let batch: Vec<Vec<u8>> = {
                let mut queue = self.lock();
                while queue.lines.is_empty() {
                    queue = self.queued.wait(queue).unwrap_or_else(|e| e.into_inner());
                }
                queue.lines.drain(..).collect()
            };
            let mut bytes = 0;
            for line in &batch {
                bytes += line.len();
                if out.write_all(line).is_err() {
                    DROPPED.inc();
                }
            }
            // stderr is unbuffered; another writer (the tests') may not be.
            let _ = out.flush();
            let mut queue = self.lock();
            queue.bytes -= bytes;
            queue.done += batch.len() as u64;
            drop(queue);
            self.written.notify_all();
        }
    }
}

/// One `write` per formatted event: tracing-subscriber formats a whole line, then writes it with
/// one `write_all`, which this answers at once. It never returns an error, so tracing-subscriber
/// never reports one (with `eprintln!`, which panics when stderr is closed).
impl Write for &LogStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogStream {
    type Writer = &'a LogStream;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

/// Starts the process's stream over stderr and routes panic messages through it: the default
/// panic hook writes stderr directly, which blocks the panicking thread forever on a full pipe (a
/// tokio worker, then the daemon) and needs the lock a blocked write holds. Called once, first.
pub fn init() -> std::io::Result<LogStream> {
    let started = LogStream::start(std::io::stderr())?;
    // main calls this once; a second call's thread would only idle on its own empty queue.
    let stream = STREAM.get_or_init(|| started);
    let panics = stream.clone();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("<unnamed>");
        let mut text = format!("thread '{name}' {info}\n");
        let backtrace = std::backtrace::Backtrace::capture();
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            text.push_str(&format!("stack backtrace:\n{backtrace}\n"));
        }
        panics.line(text.as_bytes());
        // A panic on the main thread ends the process: let its message out first. Elsewhere (a
        // tokio task) the process goes on, and the writer gets to it.
        if name == "main" {
            panics.flush(FLUSH_TIMEOUT);
        }
    }));
    Ok(stream.clone())
}

/// Writes `text` (whole lines) through the process's stream; before [`init`], straight to stderr,
/// a failed write ignored (`eprint!` would panic).
pub fn line(text: &str) {
    match STREAM.get() {
        Some(stream) => stream.line(text.as_bytes()),
        _ => {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
    }
}

/// Waits up to [`FLUSH_TIMEOUT`] for the process's queued lines (at exit).
pub fn flush() -> bool {
    match STREAM.get() {
        Some(stream) => stream.flush(FLUSH_TIMEOUT),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Output that fails every write, as stderr does once its reader is gone.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }

    /// Output that blocks every write until opened, as a full pipe nobody reads.
    #[derive(Clone, Default)]
    struct Gated {
        open: Arc<(Mutex<bool>, Condvar)>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Gated {
        fn open(&self) {
            *self.open.0.lock().unwrap() = true;
            self.open.1.notify_all();
        }
    }

    impl Write for Gated {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut open = self.open.0.lock().unwrap();
            while !*open {
                open = self.open.1.wait(open).unwrap();
            }
            self.written.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    // DROPPED is process-wide and other tests may drop lines meanwhile: these count at least.

    #[test]
    fn lines_a_closed_output_refuses_are_counted() {
        let stream = LogStream::start(Closed).unwrap();
        let before = DROPPED.get();
        for _ in 0..3 {
            (&stream).write_all(b"a line\n").unwrap();
        }
        assert!(stream.flush(Duration::from_secs(30)), "a failing write is done at once");
        assert!(DROPPED.get() >= before + 3);
    }

    #[test]
    fn a_blocked_output_blocks_nobody_and_the_lines_past_the_queue_are_dropped() {
        let gated = Gated::default();
        let stream = LogStream::start(gated.clone()).unwrap();
        let line = vec![b'x'; 64 * 1024];
        let before = DROPPED.get();
        // 16 lines of 64 KiB fill the 1 MiB (one of them in the blocked writer's hands); 4 more
        // are dropped, none waits.
        for _ in 0..20 {
            stream.line(&line);
        }
        assert!(DROPPED.get() >= before + 4);
        assert!(!stream.flush(Duration::from_millis(50)), "a flush gives up on a blocked output");
        gated.open();
        assert!(stream.flush(Duration::from_secs(30)));
        assert_eq!(gated.written.lock().unwrap().len(), 16 * line.len());
        // The queue is empty again: a line bigger than all of it is still taken.
        stream.line(&vec![b'y'; QUEUE_BYTES + 1]);
        assert!(stream.flush(Duration::from_secs(30)));
        assert_eq!(gated.written.lock().unwrap().len(), 16 * line.len() + QUEUE_BYTES + 1);
    }
}

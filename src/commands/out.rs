//! The commands' standard output. `print!` and `println!` panic when stdout is closed
//! (`builder-monitor status | head -1`); `out!` and `outln!` stop writing instead, quietly for a
//! closed pipe, as a pipeline expects, and with one error line for any other failure (a full disk),
//! which also makes the command exit 1: output asked for and lost is a failure.

use std::io::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};

/// 0 while writing, 1 once the reader went away, 2 once a write failed otherwise.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Writes `args` to stdout and flushes, unless an earlier write failed.
pub fn write(args: std::fmt::Arguments<'_>) {
    if STATE.load(Ordering::Relaxed) != 0 {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            STATE.store(1, Ordering::Relaxed);
        } else {
            STATE.store(2, Ordering::Relaxed);
            builder_monitor::log_stream::line(&format!("error: cannot write to standard output: {e}\n"));
        }
    }
}

/// Whether output was lost other than to a reader that stopped reading.
pub fn failed() -> bool {
    STATE.load(Ordering::Relaxed) == 2
}

/// `print!` to stdout without the panic on a closed or failing stdout.
macro_rules! out {
    ($($arg:tt)*) => { $crate::commands::out::write(format_args!($($arg)*)) };
}

/// `println!` to stdout without the panic on a closed or failing stdout.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::commands::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}

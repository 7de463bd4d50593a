//! One writer per SQLite ledger: `run` and `run --once` hold an exclusive OS lock on a file beside
//! the ledger for their whole life, and a second one is refused with the holder's pid, host and start.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::LedgerError;

/// The lock; released when dropped, or by the OS when the process ends however it ends.
#[derive(Debug)]
pub struct WriterLock {
    _file: File,
    path: PathBuf,
}

/// Who holds a ledger, as written into its lock file.
#[derive(Debug, Serialize, Deserialize)]
struct Holder {
    pid: u32,
    host: String,
    since: String,
}

impl WriterLock {
    /// Takes the lock for the ledger at `ledger` (the file `LEDGER.lock`, created with its directory
    /// if needed), or says who holds it. `now` is written in the file as since when it is held.
    pub fn acquire(ledger: &Path, now: chrono::DateTime<chrono::Utc>) -> Result<Self, LedgerError> {
        let path = lock_path(ledger);
        let io_err = |error| LedgerError::Lock { path: path.clone(), error };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_err)?;
        }
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io_err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(LedgerError::Locked { path: ledger.to_path_buf(), holder: describe_holder(&mut file) });
            }
            Err(TryLockError::Error(e)) => return Err(io_err(e)),
        }
        let holder = Holder {
            pid: std::process::id(),
            host: host_name(),
            since: builder_monitor_core::schedule::timestamp(now),
        };
        let text = serde_json::to_string(&holder).unwrap_or_default() + "\n";
        file.set_len(0).map_err(io_err)?;
        file.seek(SeekFrom::Start(0)).map_err(io_err)?;
        file.write_all(text.as_bytes()).map_err(io_err)?;
        Ok(WriterLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `LEDGER.lock`.
pub fn lock_path(ledger: &Path) -> PathBuf {
    let mut name = ledger.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// "pid 123 on host h since T", read from the holder's lock file. The holder writes it just after
/// taking the lock, so a contender that comes in between reads again for a moment.
fn describe_holder(file: &mut File) -> String {
    let mut last = String::new();
    for _ in 0..50 {
        last.clear();
        if file.seek(SeekFrom::Start(0)).is_ok()
            && file.read_to_string(&mut last).is_ok()
            && let Ok(h) = serde_json::from_str::<Holder>(last.trim())
        {
            return format!("pid {} on host {} since {}", h.pid, h.host, h.since);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if last.trim().is_empty() {
        "its lock file names no holder yet".to_string()
    } else {
        format!("its lock file says {:?}", last.trim())
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("state").join("ledger.db");
        let at = builder_monitor_core::schedule::parse_timestamp("2026-12-01T00:50:00Z").unwrap();
        let first = WriterLock::acquire(&ledger, at).unwrap();
        assert_eq!(first.path(), dir.path().join("state").join("ledger.db.lock"));
        let err = WriterLock::acquire(&ledger, at).unwrap_err().to_string();
        let pid = format!("pid {} on host {} since 2026-12-01T00:50:00Z", std::process::id(), host_name());
        assert!(err.contains(&pid), "{err}");
        assert!(err.contains("in use by another builder-monitor daemon"), "{err}");
        drop(first);
        let again = WriterLock::acquire(&ledger, at).unwrap();
        let text = std::fs::read_to_string(again.path()).unwrap();
        assert_eq!(text.lines().count(), 1, "rewritten, not appended: {text}");
    }
}

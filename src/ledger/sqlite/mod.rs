//! The embedded SQLite ledger: a file, WAL mode, a schema migrated forward by version, one
//! connection whose calls run on the blocking pool, and one transaction per write. Each record
//! family's operations are in the file of its name; rows are read by column name, one reader per
//! row shape.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

/// The position of column `$name` in the SELECT list `$columns`, found at compile time (see
/// [`column()`]).
macro_rules! col {
    ($columns:expr, $name:literal) => {{
        // An item, not an inline `const` block: `cargo check` evaluates it too.
        const AT: usize = $crate::ledger::sqlite::column($columns, $name);
        AT
    }};
}

mod actions;
mod checks;
mod claims;
mod outbox;
mod registries;
mod rollout;
mod tags;
#[cfg(test)]
mod tests;

use super::{DeliveryState, LedgerBackend, LedgerError};
use builder_monitor_core::rollout::ActionState;
use builder_monitor_core::schedule::parse_timestamp;

const MIGRATIONS: &[&str] = &[
    // 1: every entity of the ledger (docs/ledger.md), so later capabilities only add rows.
    r#"
    CREATE TABLE watches (
        name TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('builder', 'run_image')),
        image TEXT NOT NULL,
        digest TEXT,
        reference TEXT,
        media_type TEXT,
        platforms TEXT NOT NULL DEFAULT '{}',
        metadata TEXT,
        pinned_since TEXT,
        first_seen TEXT NOT NULL,
        last_check TEXT,
        last_result TEXT CHECK (last_result IN ('ok', 'error')),
        last_error_reason TEXT,
        last_error TEXT,
        last_change TEXT,
        consecutive_failures INTEGER NOT NULL DEFAULT 0,
        failing_since TEXT,
        pending_digest TEXT,
        pending_since TEXT,
        moves INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE digests (
        watch TEXT NOT NULL REFERENCES watches(name) ON DELETE CASCADE,
        digest TEXT NOT NULL,
        first_seen TEXT NOT NULL,
        last_pinned TEXT NOT NULL,
        PRIMARY KEY (watch, digest)
    );
    CREATE TABLE changes (
        id TEXT PRIMARY KEY,
        watch TEXT NOT NULL REFERENCES watches(name) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        previous TEXT NOT NULL,
        current TEXT NOT NULL,
        previous_reference TEXT NOT NULL,
        current_reference TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('none', 'rebase', 'rebuild', 'unknown')),
        change TEXT NOT NULL,
        rollback INTEGER NOT NULL,
        detected TEXT NOT NULL,
        UNIQUE (watch, seq)
    );
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        type TEXT NOT NULL,
        watch TEXT NOT NULL,
        change_id TEXT,
        time TEXT NOT NULL,
        document TEXT NOT NULL
    );
    CREATE INDEX events_by_watch ON events (watch, seq);
    CREATE TABLE deliveries (
        event TEXT NOT NULL REFERENCES events(id) ON DELETE CASCADE,
        alert TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'dead')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt TEXT NOT NULL,
        last_status TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        PRIMARY KEY (event, alert)
    );
    CREATE INDEX deliveries_due ON deliveries (state, next_attempt);
    CREATE TABLE actions (
        change_id TEXT NOT NULL,
        image TEXT NOT NULL,
        key TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL CHECK (kind IN ('rebase', 'rebuild')),
        state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'superseded')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt TEXT NOT NULL,
        object_name TEXT,
        output_tail TEXT,
        target TEXT NOT NULL,
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        PRIMARY KEY (change_id, image)
    );
    CREATE INDEX actions_due ON actions (state, next_attempt);
    "#,
    // 2: what the last attempt of an action said (exit status, timeout, refusal).
    r#"
    ALTER TABLE actions ADD COLUMN detail TEXT;
    CREATE INDEX actions_by_image ON actions (image, state);
    "#,
    // 3: the process group (and its leader's start time) of a running local command, so a restart
    // can make sure it is gone before the action runs again.
    r#"
    ALTER TABLE actions ADD COLUMN process_group INTEGER;
    ALTER TABLE actions ADD COLUMN process_started INTEGER;
    "#,
    // 4: each move of an app image's tag (by an action or a rollback): the digests before and after.
    r#"
    CREATE TABLE tag_moves (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        image TEXT NOT NULL,
        reference TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('rebase', 'rebuild', 'rollback')),
        action TEXT,
        before TEXT,
        after TEXT,
        time TEXT NOT NULL
    );
    CREATE INDEX tag_moves_by_image ON tag_moves (image, seq);
    "#,
    // 5: roll-out control. The actions table is rebuilt (SQLite cannot widen a CHECK) with the
    // states held, awaiting_approval and rejected, each action's wave, whether it needs approval,
    // whether `release` let it go, and who decided on it; the freeze is one row.
    r#"
    CREATE TABLE actions_v5 (
        change_id TEXT NOT NULL,
        image TEXT NOT NULL,
        key TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL CHECK (kind IN ('rebase', 'rebuild')),
        state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'superseded',
                                             'held', 'awaiting_approval', 'rejected')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt TEXT NOT NULL,
        object_name TEXT,
        output_tail TEXT,
        target TEXT NOT NULL,
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        detail TEXT,
        process_group INTEGER,
        process_started INTEGER,
        wave INTEGER NOT NULL DEFAULT 1,
        needs_approval INTEGER NOT NULL DEFAULT 0,
        released INTEGER NOT NULL DEFAULT 0,
        decided_by TEXT,
        decided_at TEXT,
        PRIMARY KEY (change_id, image)
    );
    INSERT INTO actions_v5 (change_id, image, key, kind, state, attempts, next_attempt, object_name, output_tail,
                            target, created, updated, detail, process_group, process_started)
        SELECT change_id, image, key, kind, state, attempts, next_attempt, object_name, output_tail,
               target, created, updated, detail, process_group, process_started FROM actions;
    DROP TABLE actions;
    ALTER TABLE actions_v5 RENAME TO actions;
    CREATE INDEX actions_due ON actions (state, next_attempt);
    CREATE INDEX actions_by_image ON actions (image, state);
    CREATE INDEX actions_by_change ON actions (change_id);
    CREATE TABLE rollout (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        frozen_since TEXT NOT NULL,
        reason TEXT,
        frozen_by TEXT NOT NULL
    );
    "#,
    // 6: write-ahead tag writes (one open per app image), and each pinned digest's platform
    // manifests, so a rebase can tell an older run image from a newer one by its pin history.
    tags::MIGRATION,
    // 7: ordered alerts, and event ids that two occurrences within one second never share. Each
    // delivery keeps its event's subject (filled in by `outbox`, which reads the event) and place in
    // the events' order, so a lane's head is one indexed look-up. Each watch counts its runs of
    // failed checks, the roll-out row its state changes (it stays when a freeze ends): their
    // events' ids name them.
    r#"
    ALTER TABLE deliveries ADD COLUMN subject TEXT;
    ALTER TABLE deliveries ADD COLUMN event_seq INTEGER;
    UPDATE deliveries SET event_seq = (SELECT seq FROM events WHERE events.id = deliveries.event);
    CREATE INDEX deliveries_by_lane ON deliveries (alert, subject, state, event_seq);
    ALTER TABLE watches ADD COLUMN failure_runs INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE rollout_v7 (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        frozen_since TEXT,
        reason TEXT,
        frozen_by TEXT,
        changes INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO rollout_v7 (id, frozen_since, reason, frozen_by, changes)
        SELECT id, frozen_since, reason, frozen_by, 1 FROM rollout;
    DROP TABLE rollout;
    ALTER TABLE rollout_v7 RENAME TO rollout;
    "#,
    // 8: deploys. The actions table is rebuilt (SQLite cannot widen a CHECK or change a primary
    // key) with the kind deploy and the state skipped, keyed by (change, image, kind) so a change's deploy of an image
    // sits beside its rebase or rebuild; each action's recorded progress (a deploy's previous and
    // written images, before it writes), and whether it holds its image (a failed or overridden
    // deploy). Rows keep their order (rowid), which tells a newer action from an older one.
    r#"
    CREATE TABLE actions_v8 (
        change_id TEXT NOT NULL,
        image TEXT NOT NULL,
        key TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL CHECK (kind IN ('rebase', 'rebuild', 'deploy')),
        state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'superseded',
                                             'held', 'awaiting_approval', 'rejected', 'skipped')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt TEXT NOT NULL,
        object_name TEXT,
        output_tail TEXT,
        target TEXT NOT NULL,
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        detail TEXT,
        process_group INTEGER,
        process_started INTEGER,
        wave INTEGER NOT NULL DEFAULT 1,
        needs_approval INTEGER NOT NULL DEFAULT 0,
        released INTEGER NOT NULL DEFAULT 0,
        decided_by TEXT,
        decided_at TEXT,
        progress TEXT,
        holds INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (change_id, image, kind)
    );
    INSERT INTO actions_v8 (change_id, image, key, kind, state, attempts, next_attempt, object_name, output_tail,
                            target, created, updated, detail, process_group, process_started, wave,
                            needs_approval, released, decided_by, decided_at)
        SELECT change_id, image, key, kind, state, attempts, next_attempt, object_name, output_tail,
               target, created, updated, detail, process_group, process_started, wave,
               needs_approval, released, decided_by, decided_at FROM actions ORDER BY rowid;
    DROP TABLE actions;
    ALTER TABLE actions_v8 RENAME TO actions;
    CREATE INDEX actions_due ON actions (state, next_attempt);
    CREATE INDEX actions_by_image ON actions (image, state);
    CREATE INDEX actions_by_change ON actions (change_id);
    CREATE INDEX actions_holding ON actions (holds) WHERE holds = 1;
    "#,
    // 9: gitops actions. The actions table is rebuilt once more, this time without a CHECK on
    // `kind`: the kinds are the Rust enum's, checked where rows are read (an unknown kind reads as
    // an unreadable target), so the next kind of action needs no table rebuild.
    r#"
    CREATE TABLE actions_v9 (
        change_id TEXT NOT NULL,
        image TEXT NOT NULL,
        key TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'superseded',
                                             'held', 'awaiting_approval', 'rejected', 'skipped')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt TEXT NOT NULL,
        object_name TEXT,
        output_tail TEXT,
        target TEXT NOT NULL,
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        detail TEXT,
        process_group INTEGER,
        process_started INTEGER,
        wave INTEGER NOT NULL DEFAULT 1,
        needs_approval INTEGER NOT NULL DEFAULT 0,
        released INTEGER NOT NULL DEFAULT 0,
        decided_by TEXT,
        decided_at TEXT,
        progress TEXT,
        holds INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (change_id, image, kind)
    );
    INSERT INTO actions_v9 SELECT * FROM actions ORDER BY rowid;
    DROP TABLE actions;
    ALTER TABLE actions_v9 RENAME TO actions;
    CREATE INDEX actions_due ON actions (state, next_attempt);
    CREATE INDEX actions_by_image ON actions (image, state);
    CREATE INDEX actions_by_change ON actions (change_id);
    CREATE INDEX actions_holding ON actions (holds) WHERE holds = 1;
    "#,
    // 10: each entry's run image name beside its metadata (filled in from the metadata by
    // `checks::backfill_run_images`), so start-up reads every pin and the run images to watch in
    // one query without decoding any metadata (`Checks::pins`).
    "ALTER TABLE watches ADD COLUMN run_image TEXT;",
    // 11: claims walk the pending actions in claim order and seek each change's lowest wave not
    // done (`claims`), rather than read every action of every open change; start-up reads every
    // pin from an index alone (`Checks::pins`): the columns after `metadata` sit behind each row's
    // overflow pages, a walk per row.
    r#"
    CREATE INDEX actions_pending ON actions (next_attempt, created, key) WHERE state = 'pending';
    CREATE INDEX actions_by_change_state ON actions (change_id, state, wave);
    CREATE INDEX watches_pins ON watches (name, kind, image, digest, run_image, last_check, last_result,
        consecutive_failures, failing_since, last_error_reason, last_error, pending_digest);
    CREATE INDEX watches_failing ON watches (name) WHERE consecutive_failures > 0;
    "#,
    // 12: the fixes that expedited an action (`[rollout] expedite`), a JSON list; NULL for none.
    "ALTER TABLE actions ADD COLUMN expedited TEXT;",
    // 13: who asked for a rollback (`by`), on its tag move and its write-ahead intent; the run
    // image each tag move left the app on (the page's "Run image" column).
    tags::MIGRATION_BY,
    // 14: what each registry answered (the referrers API), for `status` and the page.
    registries::MIGRATION,
];

/// The schema version whose migration is followed by [`outbox::backfill_subjects`].
const LANES: usize = 7;
/// The schema version whose migration is followed by [`checks::backfill_run_images`].
const RUN_IMAGES: usize = 10;

/// The ledger handle; cheap to clone. SQLite calls run on the blocking pool.
#[derive(Clone)]
pub struct SqliteLedger {
    /// One connection: callers queue for it here, asynchronously, so only the caller holding it
    /// occupies a blocking-pool thread (a std mutex parked one thread per waiting caller).
    conn: Arc<tokio::sync::Mutex<Connection>>,
    path: PathBuf,
}

impl SqliteLedger {
    /// Opens (creating if needed) the ledger file and brings its schema up to date: the daemon's
    /// way in (`run` holds the ledger's [`WriterLock`](super::WriterLock) first).
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| LedgerError::Open {
                path: path.to_path_buf(),
                error: rusqlite::Error::InvalidPath(PathBuf::from(format!("{}: {e}", dir.display()))),
            })?;
        }
        let open_err = |error| LedgerError::Open { path: path.to_path_buf(), error };
        let mut conn = Connection::open(path).map_err(open_err)?;
        // Before anything that locks: every later statement waits out other processes' locks.
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        use_wal(&conn).map_err(open_err)?;
        // NORMAL is durable across process crashes in WAL mode. A 512 KiB page cache (SQLite's
        // default is 2 MiB): unchanged checks write nothing, and the batched writes and status
        // reads find the pages in the OS page cache.
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA cache_size = -512;")
            .map_err(open_err)?;
        migrate(&mut conn, path)?;
        // Room for every statement the ledger runs (`exec`, `row`).
        conn.set_prepared_statement_cache_capacity(64);
        Ok(Self { conn: Arc::new(tokio::sync::Mutex::new(conn)), path: path.to_path_buf() })
    }

    /// Opens an existing ledger read-only, for the commands that only read it: nothing is created,
    /// migrated or locked, and a ledger of another schema version is refused, not changed.
    pub fn open_read_only(path: &Path) -> Result<Self, LedgerError> {
        let open_err = |error| LedgerError::Open { path: path.to_path_buf(), error };
        match std::fs::metadata(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LedgerError::Missing { path: path.to_path_buf() });
            }
            Err(e) => {
                return Err(open_err(rusqlite::Error::InvalidPath(PathBuf::from(format!("{}: {e}", path.display())))));
            }
        }
        // A WAL database is read through its -wal and -shm files, which SQLite creates (as the
        // reader's user) when they are missing. They exist while a writer has the ledger open; without
        // them every write is checkpointed into the file itself, and the daemon writes only to a new
        // -wal until its next checkpoint, so the file can be read as it is (immutable) and no file is
        // created beside it.
        let immutable = !sidecar(path, "-wal").exists();
        let uri = format!("file:{}?mode=ro{}", uri_path(path), if immutable { "&immutable=1" } else { "" });
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(uri, flags).map_err(open_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
        let found = user_version(&conn).map_err(open_err)?;
        let supported = MIGRATIONS.len() as i64;
        let path = path.to_path_buf();
        match found {
            // An empty file: the daemon is creating the schema right now.
            0 => return Err(LedgerError::Missing { path }),
            f if f > supported => return Err(LedgerError::NewerSchema { path, found, supported }),
            f if f < supported => return Err(LedgerError::OlderSchema { path, found, supported }),
            _ => {}
        }
        conn.set_prepared_statement_cache_capacity(64);
        Ok(Self { conn: Arc::new(tokio::sync::Mutex::new(conn)), path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the connection, on the blocking pool, once the callers before have.
    async fn with<T, F>(&self, f: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, LedgerError> + Send + 'static,
    {
        let mut conn = self.conn.clone().lock_owned().await;
        tokio::task::spawn_blocking(move || f(&mut conn)).await.map_err(LedgerError::Worker)?
    }
}

impl LedgerBackend for SqliteLedger {
    async fn ping(&self) -> Result<(), LedgerError> {
        self.with(|conn| Ok(row(conn, "SELECT 1", [], |_| Ok(()))?)).await
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }
}

/// How long a statement waits for another process's lock before failing with "database is locked".
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Switches to WAL (readers never block the daemon). The switch needs a moment alone with the
/// file, and SQLite answers a concurrent one with SQLITE_BUSY at once rather than through the busy
/// timeout, so it is retried for as long as that timeout.
fn use_wal(conn: &Connection) -> rusqlite::Result<()> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Ok(_) => return Ok(()),
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

/// Brings the schema up to date in one exclusive transaction that reads the version again inside
/// it: of any number of processes opening a fresh ledger at once, the first migrates and the rest
/// find it done.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), LedgerError> {
    let supported = MIGRATIONS.len() as i64;
    let newer = |found| LedgerError::NewerSchema { path: path.to_path_buf(), found, supported };
    // An up-to-date ledger opens without waiting for the write lock.
    match user_version(conn)? {
        found if found > supported => return Err(newer(found)),
        found if found == supported => return Ok(()),
        _ => {}
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Exclusive)?;
    let found = user_version(&tx)?;
    if found > supported {
        return Err(newer(found));
    }
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(found as usize).map(|(i, sql)| (i + 1, sql)) {
        tx.execute_batch(sql)?;
        if version == LANES {
            outbox::backfill_subjects(&tx)?;
        }
        if version == RUN_IMAGES {
            checks::backfill_run_images(&tx)?;
        }
    }
    tx.pragma_update(None, "user_version", supported)?;
    tx.commit()?;
    Ok(())
}

/// `ledger.db` + `-wal`: the files SQLite keeps beside a database.
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A path as the file part of an SQLite URI: `%`, `?` and `#` would end or escape it.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for &b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'%' | b'?' | b'#' | 0x80.. => out.push_str(&format!("%{b:02X}")),
            b => out.push(b as char),
        }
    }
    out
}

/// Runs a statement through the connection's statement cache: a check runs the same few statements
/// each time, and preparing them anew was about a tenth of a check's CPU.
fn exec(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}

/// `query_row` through the statement cache (see `exec`).
fn row<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.prepare_cached(sql)?.query_row(params, f)
}

/// The first row of a query, read by `read` (which may find it unreadable).
fn first<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    read: impl FnOnce(&rusqlite::Row<'_>) -> Result<T, LedgerError>,
) -> Result<Option<T>, LedgerError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    rows.next()?.map(read).transpose()
}

/// Every row of a query, each read by `read` (which may find one unreadable).
fn all<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    mut read: impl FnMut(&rusqlite::Row<'_>) -> Result<T, LedgerError>,
) -> Result<Vec<T>, LedgerError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(read(r)?);
    }
    Ok(out)
}

/// The position of column `name` in `columns` (a SELECT list: names separated by commas). Rows are
/// read by column name: by `row.get("name")`, or, for the row shapes whose SELECT list is a
/// constant (the entry a check reads each time among them), through [`col!`], which asks this at
/// compile time. So a reader names each column it reads, a name the list lacks fails the build,
/// and the read costs no look-up of names.
const fn column(columns: &str, name: &str) -> usize {
    let (list, name) = (columns.as_bytes(), name.as_bytes());
    let (mut i, mut index) = (0, 0);
    loop {
        while i < list.len() && list[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while i < list.len() && list[i] != b',' {
            i += 1;
        }
        let mut end = i;
        while end > start && list[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        if end - start == name.len() {
            let mut k = 0;
            while k < name.len() && list[start + k] == name[k] {
                k += 1;
            }
            if k == name.len() {
                return index;
            }
        }
        if i >= list.len() {
            panic!("a column that is not in the SELECT list");
        }
        i += 1;
        index += 1;
    }
}

/// A time column, read back as written (`timestamp` or `timestamp_millis`, by what the column is for).
struct Time(DateTime<Utc>);

impl FromSql for Time {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let text = value.as_str()?;
        parse_timestamp(text)
            .map(Time)
            .ok_or_else(|| FromSqlError::Other(format!("not an RFC 3339 time: {text:?}").into()))
    }
}

/// An action's state column (`ActionState` lives in the core, so rusqlite's traits go on this).
struct State(ActionState);

impl FromSql for State {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let text = value.as_str()?;
        ActionState::parse(text)
            .map(State)
            .ok_or_else(|| FromSqlError::Other(format!("unknown action state {text:?}").into()))
    }
}

/// An action's kind as stored (`rebase`, `rebuild`, `deploy`, `gitops`).
struct Kind(builder_monitor_core::plan::ActionKind);

impl FromSql for Kind {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let text = value.as_str()?;
        builder_monitor_core::plan::ActionKind::parse(text)
            .map(Kind)
            .ok_or_else(|| FromSqlError::Other(format!("unknown action kind {text:?}").into()))
    }
}

impl ToSql for State {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.0.as_str().into())
    }
}

impl ToSql for DeliveryState {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

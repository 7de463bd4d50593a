//! The embedded SQLite ledger: a file, WAL mode, a schema migrated forward by version, and one
//! transaction per check outcome.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params};

mod freeze;
mod intents;
mod outbox;

use freeze::read_freeze;

use super::*;
use builder_monitor_core::cnb::Change;
use builder_monitor_core::event::Event;
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::schedule::{parse_timestamp, timestamp, timestamp_millis};

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
    intents::MIGRATION,
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
];

/// The schema version whose migration is followed by [`outbox::backfill_subjects`].
const LANES: usize = 7;

/// The columns of an [`ActionRecord`], in the order [`action_record`] reads them.
const ACTION_COLUMNS: &str = "key, change_id, image, kind, state, attempts, next_attempt, detail, output_tail, updated,
     wave, needs_approval, released, decided_by, decided_at, created";

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

    async fn with<T, F>(&self, f: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, LedgerError> + Send + 'static,
    {
        let mut conn = self.conn.clone().lock_owned().await;
        tokio::task::spawn_blocking(move || f(&mut conn)).await.map_err(LedgerError::Worker)?
    }

    /// A trivial query: the ledger answers (readiness).
    pub async fn ping(&self) -> Result<(), LedgerError> {
        self.with(|conn| Ok(row(conn, "SELECT 1", [], |_| Ok(()))?)).await
    }

    pub async fn watch(&self, name: &str) -> Result<Option<WatchRecord>, LedgerError> {
        let name = name.to_string();
        self.with(move |conn| read_watch(conn, &name)).await
    }

    pub async fn watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        self.with(|conn| read_watches(conn, "SELECT name FROM watches ORDER BY name")).await
    }

    pub async fn failing_watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        self.with(|conn| read_watches(conn, "SELECT name FROM watches WHERE consecutive_failures > 0 ORDER BY name"))
            .await
    }

    pub async fn history(&self, watch: &str, limit: usize) -> Result<Vec<PinnedDigest>, LedgerError> {
        let watch = watch.to_string();
        self.with(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT digest, first_seen, platforms FROM digests WHERE watch = ?1
                 ORDER BY last_pinned DESC, rowid DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![watch, limit as i64], |r| {
                let platforms: String = r.get(2)?;
                Ok(PinnedDigest {
                    digest: r.get(0)?,
                    first_seen: r.get::<_, Time>(1)?.0,
                    platforms: serde_json::from_str(&platforms).unwrap_or_default(),
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    /// Whether `digest` was ever pinned for this watch (within the kept history).
    pub async fn has_pinned(&self, watch: &str, digest: &str) -> Result<bool, LedgerError> {
        let (watch, digest) = (watch.to_string(), digest.to_string());
        self.with(move |conn| {
            Ok(row(conn, "SELECT 1 FROM digests WHERE watch = ?1 AND digest = ?2", params![watch, digest], |_| Ok(()))
                .optional()?
                .is_some())
        })
        .await
    }

    /// Commits a check's outcome: watch state, pin, history, change and events in one transaction.
    pub async fn commit(&self, record: CheckRecord) -> Result<(), LedgerError> {
        self.commit_touching(record, &[]).await
    }

    /// [`SqliteLedger::commit`], writing the `touches` kept until now in the same transaction.
    pub async fn commit_touching(&self, record: CheckRecord, touches: &[Touch]) -> Result<(), LedgerError> {
        let touches = touches.to_vec();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            touch_checks(&tx, &touches)?;
            commit_check(&tx, &record)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Writes the times of unchanged checks, all in one transaction.
    pub async fn touch(&self, touches: &[Touch]) -> Result<(), LedgerError> {
        let touches = touches.to_vec();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            touch_checks(&tx, &touches)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Most recent changes first; all watches when `watch` is `None`.
    pub async fn changes(&self, watch: Option<&str>, limit: usize) -> Result<Vec<ChangeRecord>, LedgerError> {
        let watch = watch.map(str::to_string);
        self.with(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT id, watch, seq, previous, current, previous_reference, current_reference, change, rollback, detected
                 FROM changes WHERE (?1 IS NULL OR watch = ?1) ORDER BY detected DESC, seq DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![watch, limit as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, String>(7)?,
                    r.get::<_, bool>(8)?,
                    r.get::<_, Time>(9)?.0,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (id, watch, seq, previous, current, previous_reference, current_reference, change, rollback, detected) =
                    row?;
                let change: Change = serde_json::from_str(&change)
                    .map_err(|e| LedgerError::Corrupt { what: "change", detail: format!("{id}: {e}") })?;
                out.push(ChangeRecord {
                    id,
                    watch,
                    seq: seq as u64,
                    previous,
                    current,
                    previous_reference,
                    current_reference,
                    change,
                    rollback,
                    detected,
                });
            }
            Ok(out)
        })
        .await
    }

    /// Takes due pending actions that the roll-out gates let start: each becomes `running` with
    /// one more attempt, atomically (the gates read in the same transaction).
    pub async fn claim_actions(
        &self,
        now: DateTime<Utc>,
        limit: usize,
        kind: Option<ActionKind>,
        rollout: &Rollout,
    ) -> Result<Vec<ClaimedAction>, LedgerError> {
        let rollout = rollout.clone();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            let freeze = read_freeze(&tx)?;
            let keys: Vec<String> = gated_pending(&tx, kind, &rollout, freeze.as_ref(), now)?
                .into_iter()
                .filter(|g| g.verdict.is_ok() && g.due <= now)
                .take(limit)
                .map(|g| g.key)
                .collect();
            let at = timestamp_millis(now);
            let mut claimed = Vec::new();
            for key in keys {
                let (change_id, image, kind, attempts, target) = row(
                    &tx,
                    "SELECT change_id, image, kind, attempts, target FROM actions WHERE key = ?1",
                    params![key],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, u32>(3)?,
                            r.get::<_, String>(4)?,
                        ))
                    },
                )?;
                let target = serde_json::from_str(&target)
                    .map_err(|e| LedgerError::Corrupt { what: "action target", detail: format!("{key}: {e}") })?;
                let kind = action_kind(&key, &kind)?;
                exec(
                    &tx,
                    "UPDATE actions SET state = 'running', attempts = attempts + 1, updated = ?2,
                         process_group = NULL, process_started = NULL WHERE key = ?1",
                    params![key, at],
                )?;
                claimed.push(ClaimedAction {
                    key,
                    change_id,
                    image,
                    kind,
                    attempt: attempts + 1,
                    target,
                    process: None,
                });
            }
            tx.commit()?;
            Ok(claimed)
        })
        .await
    }

    /// Records the process group a `running` action's command runs in.
    pub async fn record_process(&self, key: &str, group: ProcessGroup) -> Result<(), LedgerError> {
        let key = key.to_string();
        self.with(move |conn| {
            exec(
                conn,
                "UPDATE actions SET process_group = ?2, process_started = ?3 WHERE key = ?1 AND state = 'running'",
                params![key, group.id, group.started as i64],
            )?;
            Ok(())
        })
        .await
    }

    /// Records an attempt's end and its events (with their outbox rows) in one transaction.
    #[allow(clippy::too_many_arguments)]
    pub async fn finish_action(&self, end: ActionEnd<'_>) -> Result<Option<ActionState>, LedgerError> {
        let ActionEnd {
            key,
            outcome,
            detail,
            output_tail,
            watch,
            events,
            deliveries,
            history,
            now,
            tag_move,
            hold,
            keep_intent,
        } = end;
        let (key, watch) = (key.to_string(), watch.to_string());
        self.with(move |conn| {
            let updated = timestamp_millis(now);
            let tx = conn.transaction()?;
            // A retry re-checks first: once a newer change has an action for the image, this
            // one's target is not the newest any more and it must not write it.
            let outcome = match outcome {
                ActionOutcome::Retry { .. } => match intents::newer_change(&tx, &key)? {
                    Some(by) => ActionOutcome::Superseded { by },
                    None => outcome,
                },
                other => other,
            };
            let (state, next, detail) = match outcome {
                ActionOutcome::Succeeded => (ActionState::Succeeded, None, detail),
                ActionOutcome::Retry { next_attempt } => {
                    (ActionState::Pending, Some(timestamp_millis(next_attempt)), detail)
                }
                ActionOutcome::Failed => (ActionState::Failed, None, detail),
                ActionOutcome::Superseded { by } => {
                    (ActionState::Superseded, None, format!("superseded by change {by}: {detail}"))
                }
            };
            if !keep_intent {
                intents::clear_action_intent(&tx, &key)?;
            }
            let ended = exec(&tx,
                "UPDATE actions SET state = ?2, next_attempt = COALESCE(?3, next_attempt), detail = ?4, output_tail = ?5,
                     updated = ?6 WHERE key = ?1 AND state = 'running'",
                params![key, state.as_str(), next, detail, output_tail, updated],
            )?;
            insert_events(&tx, &watch, now, &events, None, &deliveries, history)?;
            if let Some(m) = &tag_move {
                insert_tag_move(&tx, m, history)?;
            }
            for held in hold.iter().flat_map(|h| h.keys.iter().map(move |k| (k, &h.detail))) {
                exec(
                    &tx,
                    "UPDATE actions SET state = 'held', detail = ?2, updated = ?3
                     WHERE key = ?1 AND state IN ('pending', 'awaiting_approval')",
                    params![held.0, held.1, updated],
                )?;
            }
            tx.commit()?;
            Ok((ended == 1).then_some(state))
        })
        .await
    }

    /// Records a tag move made outside an action (`rollback`).
    pub async fn record_tag_move(&self, _watch: &str, tag_move: TagMove, history: usize) -> Result<(), LedgerError> {
        self.with(move |conn| {
            let tx = conn.transaction()?;
            insert_tag_move(&tx, &tag_move, history)?;
            intents::clear_image_intent(&tx, &tag_move.image)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// The newest tag moves first, of one image or of all.
    pub async fn tag_moves(&self, image: Option<&str>, limit: usize) -> Result<Vec<TagMove>, LedgerError> {
        let image = image.map(str::to_string);
        self.with(move |conn| {
            tag_rows(
                conn,
                "SELECT image, reference, kind, action, before, after, time FROM tag_moves
                 WHERE (?1 IS NULL OR image = ?1) ORDER BY seq DESC LIMIT ?2",
                params![image, limit as i64],
                "tag move kind",
            )
        })
        .await
    }

    /// When the next pending action (of `kind`) may start: none while frozen, the next window's
    /// opening while all are closed; actions waiting for a lower wave start when it ends.
    pub async fn next_action_at(
        &self,
        kind: Option<ActionKind>,
        rollout: &Rollout,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, LedgerError> {
        let rollout = rollout.clone();
        self.with(move |conn| {
            let freeze = read_freeze(conn)?;
            Ok(next_start(gated_pending(conn, kind, &rollout, freeze.as_ref(), now)?, &rollout, freeze.as_ref(), now))
        })
        .await
    }

    /// Records events (and their outbox rows) outside a check, e.g. `build.started`.
    pub async fn record_events(
        &self,
        watch: &str,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let watch = watch.to_string();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            insert_events(&tx, &watch, now, &events, None, &deliveries, history)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Actions `running` now (a cluster may be carrying them out for us).
    pub async fn running_actions(&self) -> Result<Vec<ClaimedAction>, LedgerError> {
        self.with(|conn| {
            let mut stmt = conn.prepare(
                "SELECT key, change_id, image, kind, attempts, target, process_group, process_started FROM actions
                 WHERE state = 'running' ORDER BY updated",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    (
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, u32>(4)?,
                        r.get::<_, String>(5)?,
                    ),
                    r.get::<_, Option<u32>>(6)?,
                    r.get::<_, Option<i64>>(7)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let ((key, change_id, image, kind, attempt, target), group, started) = row?;
                let process =
                    group.zip(started).map(|(id, started)| ProcessGroup { id, started: started.max(0) as u64 });
                let target = serde_json::from_str(&target)
                    .map_err(|e| LedgerError::Corrupt { what: "action target", detail: format!("{key}: {e}") })?;
                let kind = ActionKind::parse(&kind)
                    .ok_or_else(|| LedgerError::Corrupt { what: "action kind", detail: format!("{key}: {kind}") })?;
                out.push(ClaimedAction { key, change_id, image, kind, attempt, target, process });
            }
            Ok(out)
        })
        .await
    }

    /// Actions left `running` by a process that died: back to `pending` (the attempt is counted).
    pub async fn requeue_running(&self) -> Result<Vec<String>, LedgerError> {
        self.with(|conn| {
            let keys: Vec<String> = conn
                .prepare("SELECT key FROM actions WHERE state = 'running'")?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            exec(conn, "UPDATE actions SET state = 'pending' WHERE state = 'running'", [])?;
            Ok(keys)
        })
        .await
    }

    /// These actions, if still `running`, back to `pending` (the attempt is counted).
    pub async fn requeue_actions(&self, keys: Vec<String>) -> Result<(), LedgerError> {
        self.with(move |conn| {
            let tx = conn.transaction()?;
            for key in &keys {
                exec(&tx, "UPDATE actions SET state = 'pending' WHERE key = ?1 AND state = 'running'", params![key])?;
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// The most recently updated actions, any state.
    pub async fn actions(&self, limit: usize) -> Result<Vec<ActionRecord>, LedgerError> {
        self.with(move |conn| {
            let sql = format!("SELECT {ACTION_COLUMNS} FROM actions ORDER BY updated DESC, key LIMIT ?1");
            let mut stmt = conn.prepare_cached(&sql)?;
            let rows = stmt.query_map(params![limit as i64], action_record)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    /// Every action of one change, any state, by wave.
    pub async fn change_actions(&self, change_id: &str) -> Result<Vec<ActionRecord>, LedgerError> {
        let change_id = change_id.to_string();
        self.with(move |conn| change_rows(conn, &change_id)).await
    }

    /// Actions not finished yet (pending, running, held, awaiting approval), oldest first.
    pub async fn open_actions(&self) -> Result<Vec<OpenAction>, LedgerError> {
        self.with(|conn| {
            let mut stmt = conn.prepare(
                "SELECT key, change_id, image, kind, state, attempts, next_attempt, wave, detail FROM actions
                 WHERE state IN ('pending', 'running', 'held', 'awaiting_approval') ORDER BY created, wave, key",
            )?;
            let rows = stmt.query_map([], |r| {
                let state = r.get::<_, State>(4)?.0;
                Ok(OpenAction {
                    key: r.get(0)?,
                    change: r.get(1)?,
                    image: r.get(2)?,
                    action: r.get(3)?,
                    state,
                    attempts: r.get(5)?,
                    next_attempt: r.get::<_, Time>(6)?.0,
                    wave: r.get(7)?,
                    detail: if state == ActionState::Held { r.get(8)? } else { None },
                    waiting_for: None,
                    gate: None,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    /// Approves, rejects or releases the actions of a change (of one image only, with `image`), in
    /// one transaction; answers the actions it moved.
    pub async fn decide(
        &self,
        change_id: &str,
        image: Option<&str>,
        verdict: Verdict,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Decided>, LedgerError> {
        let (change_id, image, by) = (change_id.to_string(), image.map(str::to_string), by.to_string());
        self.with(move |conn| {
            let tx = conn.transaction()?;
            let rows = change_rows(&tx, &change_id)?;
            let at = timestamp_millis(now);
            let decided_at = timestamp(now);
            let mut out = Vec::new();
            for a in rows.iter().filter(|a| image.as_deref().is_none_or(|i| a.image == i)) {
                let Some(state) = verdict.next_state(a) else { continue };
                let decided = matches!(verdict, Verdict::Approve | Verdict::Reject);
                exec(
                    &tx,
                    "UPDATE actions SET state = ?2, updated = ?3,
                         decided_by = CASE WHEN ?4 THEN ?5 ELSE decided_by END,
                         decided_at = CASE WHEN ?4 THEN ?6 ELSE decided_at END,
                         released = CASE WHEN ?7 THEN 1 ELSE released END
                     WHERE key = ?1",
                    params![a.key, state.as_str(), at, decided, by, decided_at, verdict == Verdict::Release],
                )?;
                out.push(Decided {
                    key: a.key.clone(),
                    image: a.image.clone(),
                    kind: action_kind(&a.key, &a.action)?,
                    state,
                });
            }
            if verdict == Verdict::Release {
                // Rows that stay as they are (running, finished) are marked released too, so the
                // change's later waves stop waiting for them.
                exec(&tx, "UPDATE actions SET released = 1 WHERE change_id = ?1", params![change_id])?;
            }
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    /// Events recorded after `after_seq`, oldest first.
    pub async fn events_after(&self, after_seq: i64, limit: usize) -> Result<Vec<StoredEvent>, LedgerError> {
        self.with(move |conn| {
            let mut stmt = conn.prepare("SELECT seq, document FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
            let rows = stmt
                .query_map(params![after_seq, limit as i64], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, document) = row?;
                let event = serde_json::from_str(&document)
                    .map_err(|e| LedgerError::Corrupt { what: "event", detail: format!("#{seq}: {e}") })?;
                out.push(StoredEvent { seq, event });
            }
            Ok(out)
        })
        .await
    }

    /// The alerts each of these events has a delivery for (any state).
    pub async fn deliveries_of(&self, events: Vec<String>) -> Result<Vec<DeliveryKey>, LedgerError> {
        self.with(move |conn| {
            let mut stmt = conn.prepare("SELECT event, alert FROM deliveries WHERE event = ?1 ORDER BY alert")?;
            let mut out = Vec::new();
            for event in &events {
                let rows = stmt.query_map([event], |r| Ok(DeliveryKey { event: r.get(0)?, alert: r.get(1)? }))?;
                out.extend(rows.collect::<Result<Vec<_>, _>>()?);
            }
            Ok(out)
        })
        .await
    }

    /// The newest events of these types, newest first.
    pub async fn latest_events(&self, types: Vec<String>, limit: usize) -> Result<Vec<StoredEvent>, LedgerError> {
        self.with(move |conn| {
            let mut stmt =
                conn.prepare("SELECT seq, document FROM events WHERE type = ?1 ORDER BY seq DESC LIMIT ?2")?;
            let mut out = Vec::new();
            for t in &types {
                let rows =
                    stmt.query_map(params![t, limit as i64], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
                for row in rows {
                    let (seq, document) = row?;
                    let event = serde_json::from_str(&document)
                        .map_err(|e| LedgerError::Corrupt { what: "event", detail: format!("#{seq}: {e}") })?;
                    out.push(StoredEvent { seq, event });
                }
            }
            out.sort_by_key(|e| std::cmp::Reverse(e.seq));
            out.truncate(limit);
            Ok(out)
        })
        .await
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

/// An [`ActionRecord`] from a row of [`ACTION_COLUMNS`].
fn action_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<ActionRecord> {
    Ok(ActionRecord {
        key: r.get(0)?,
        change: r.get(1)?,
        image: r.get(2)?,
        action: r.get(3)?,
        state: r.get::<_, State>(4)?.0,
        attempts: r.get(5)?,
        next_attempt: r.get::<_, Time>(6)?.0,
        detail: r.get(7)?,
        output_tail: r.get(8)?,
        updated: r.get::<_, Time>(9)?.0,
        wave: r.get(10)?,
        needs_approval: r.get(11)?,
        released: r.get(12)?,
        decided_by: r.get(13)?,
        decided_at: r.get::<_, Option<Time>>(14)?.map(|t| t.0),
        created: r.get::<_, Time>(15)?.0,
    })
}

fn change_rows(conn: &Connection, change_id: &str) -> Result<Vec<ActionRecord>, LedgerError> {
    let sql = format!("SELECT {ACTION_COLUMNS} FROM actions WHERE change_id = ?1 ORDER BY wave, created, key");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![change_id], action_record)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn action_kind(key: &str, kind: &str) -> Result<ActionKind, LedgerError> {
    ActionKind::parse(kind)
        .ok_or_else(|| LedgerError::Corrupt { what: "action kind", detail: format!("{key}: {kind}") })
}

/// The verdict of the roll-out gates on every pending action (of `kind`, when given): for each,
/// its key, when it is due and whether it may start now.
fn gated_pending(
    conn: &Connection,
    kind: Option<ActionKind>,
    rollout: &Rollout,
    freeze: Option<&Freeze>,
    now: DateTime<Utc>,
) -> Result<Vec<Gated>, LedgerError> {
    let only = kind.map(ActionKind::as_str);
    let sql = format!(
        "SELECT {ACTION_COLUMNS} FROM actions WHERE change_id IN
             (SELECT change_id FROM actions WHERE state = 'pending' AND (?1 IS NULL OR kind = ?1))
         ORDER BY change_id, wave, created, key"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows: Vec<ActionRecord> = stmt.query_map(params![only], action_record)?.collect::<Result<_, _>>()?;
    let mut running = conn.prepare_cached("SELECT image, change_id FROM actions WHERE state = 'running'")?;
    let running = running.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?;
    Ok(gate_rows(&rows, kind, rollout, freeze, now, &running))
}

/// The entries of the watches `names_query` names (its one column), in its order.
fn read_watches(conn: &Connection, names_query: &str) -> Result<Vec<WatchRecord>, LedgerError> {
    let names: Vec<String> = conn.prepare(names_query)?.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    names.iter().filter_map(|n| read_watch(conn, n).transpose()).collect()
}

fn read_watch(conn: &Connection, name: &str) -> Result<Option<WatchRecord>, LedgerError> {
    let row = row(
        conn,
        "SELECT name, kind, image, digest, reference, media_type, platforms, metadata, pinned_since, first_seen,
                    last_check, last_result, last_error_reason, last_error, last_change, consecutive_failures,
                    failing_since, pending_digest, pending_since, moves, failure_runs
             FROM watches WHERE name = ?1",
        params![name],
        |r| {
            Ok((
                (
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, Option<String>>(7)?,
                    r.get::<_, Option<Time>>(8)?.map(|t| t.0),
                    r.get::<_, Time>(9)?.0,
                ),
                (
                    r.get::<_, Option<Time>>(10)?.map(|t| t.0),
                    r.get::<_, Option<String>>(11)?,
                    r.get::<_, Option<String>>(12)?,
                    r.get::<_, Option<String>>(13)?,
                    r.get::<_, Option<Time>>(14)?.map(|t| t.0),
                    r.get::<_, i64>(15)?,
                    r.get::<_, Option<Time>>(16)?.map(|t| t.0),
                    r.get::<_, Option<String>>(17)?,
                    r.get::<_, Option<Time>>(18)?.map(|t| t.0),
                    r.get::<_, i64>(19)?,
                ),
                r.get::<_, i64>(20)?,
            ))
        },
    )
    .optional()?;
    let Some((
        (name, kind, image, digest, reference, media_type, platforms, metadata, pinned_since, first_seen),
        (
            last_check,
            last_result,
            last_error_reason,
            last_error,
            last_change,
            failures,
            failing_since,
            pending_digest,
            pending_since,
            moves,
        ),
        failure_runs,
    )) = row
    else {
        return Ok(None);
    };
    let corrupt = |what, detail: String| LedgerError::Corrupt { what, detail: format!("watch {name}: {detail}") };
    let platforms: BTreeMap<String, String> =
        serde_json::from_str(&platforms).map_err(|e| corrupt("platform map", e.to_string()))?;
    let metadata =
        metadata.map(|m| serde_json::from_str(&m)).transpose().map_err(|e| corrupt("metadata", e.to_string()))?;
    let pin = match (digest, reference) {
        (Some(digest), Some(reference)) => Some(PinRecord {
            digest,
            reference,
            media_type: media_type.unwrap_or_default(),
            platforms,
            since: pinned_since.unwrap_or(first_seen),
        }),
        _ => None,
    };
    Ok(Some(WatchRecord {
        kind: if kind == "run_image" { WatchKind::RunImage } else { WatchKind::Builder },
        name,
        image,
        pin,
        metadata,
        first_seen,
        last_check,
        last_ok: last_result.map(|r| r == "ok"),
        last_error_reason,
        last_error,
        last_change,
        consecutive_failures: failures.max(0) as u32,
        failing_since,
        pending: pending_digest.zip(pending_since).map(|(digest, since)| HeldDigest { digest, since }),
        moves: moves.max(0) as u64,
        failure_runs: failure_runs.max(0) as u64,
    }))
}

/// A touch moves only `last_check`, forward, on a succeeding entry of the same image: whatever was
/// committed since it was taken wins.
fn touch_checks(tx: &Transaction<'_>, touches: &[Touch]) -> Result<(), LedgerError> {
    for t in touches {
        exec(
            tx,
            "UPDATE watches SET last_check = ?2
             WHERE name = ?1 AND image = ?3 AND last_result = 'ok' AND (last_check IS NULL OR last_check < ?2)",
            params![t.watch, timestamp(t.time), t.image],
        )?;
    }
    Ok(())
}

fn commit_check(tx: &Transaction<'_>, r: &CheckRecord) -> Result<(), LedgerError> {
    let time = timestamp(r.time);
    // Failure runs are counted per image, as the check counts them (`decide`): a new entry or
    // image starts at none.
    let before: Option<String> =
        row(tx, "SELECT image FROM watches WHERE name = ?1", params![r.watch], |r| r.get(0)).optional()?;
    let new_image = before.as_deref() != Some(r.image.as_str());
    exec(
        tx,
        "INSERT INTO watches (name, kind, image, first_seen) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, image = excluded.image",
        params![r.watch, r.kind.as_str(), r.image, time],
    )?;
    let (ok, reason, message) = match &r.outcome {
        Ok(()) => (true, None, None),
        Err(CheckFailure { reason, message }) => (false, Some(reason), Some(message)),
    };
    exec(
        tx,
        "UPDATE watches SET last_check = ?2, last_result = ?3, last_error_reason = ?4, last_error = ?5,
             consecutive_failures = CASE WHEN ?6 THEN 0 ELSE consecutive_failures + 1 END,
             failure_runs = CASE WHEN ?9 THEN NOT ?6 WHEN NOT ?6 AND consecutive_failures = 0 THEN failure_runs + 1
                                 ELSE failure_runs END,
             failing_since = CASE WHEN ?6 THEN NULL ELSE COALESCE(failing_since, ?2) END,
             pending_digest = ?7, pending_since = ?8
         WHERE name = ?1",
        params![
            r.watch,
            time,
            if ok { "ok" } else { "error" },
            reason,
            message,
            ok,
            r.pending.as_ref().map(|p| &p.digest),
            r.pending.as_ref().map(|p| timestamp(p.since)),
            new_image,
        ],
    )?;
    if let Some(pin) = &r.pin {
        let platforms = serde_json::to_string(&pin.platforms).unwrap_or_else(|_| "{}".into());
        let metadata = pin.metadata.as_ref().map(|m| m.to_string());
        exec(tx,
            "UPDATE watches SET digest = ?2, reference = ?3, media_type = ?4, platforms = ?5, metadata = ?6, pinned_since = ?7
             WHERE name = ?1",
            params![r.watch, pin.digest, pin.reference, pin.media_type, platforms, metadata, time],
        )?;
        exec(
            tx,
            "INSERT INTO digests (watch, digest, first_seen, last_pinned, platforms) VALUES (?1, ?2, ?3, ?3, ?4)
             ON CONFLICT (watch, digest) DO UPDATE SET last_pinned = excluded.last_pinned, platforms = excluded.platforms",
            params![r.watch, pin.digest, time, intents::platform_digests(&pin.platforms)],
        )?;
        exec(
            tx,
            "DELETE FROM digests WHERE watch = ?1 AND digest NOT IN
                 (SELECT digest FROM digests WHERE watch = ?1 ORDER BY last_pinned DESC, rowid DESC LIMIT ?2)",
            params![r.watch, (r.history + 1) as i64],
        )?;
    }
    if let Some(c) = &r.change {
        let change = serde_json::to_string(&c.change).unwrap_or_default();
        exec(tx,
            "INSERT INTO changes (id, watch, seq, previous, current, previous_reference, current_reference, kind, change, rollback, detected)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT (id) DO NOTHING",
            params![
                c.id,
                c.watch,
                c.seq as i64,
                c.previous,
                c.current,
                c.previous_reference,
                c.current_reference,
                c.change.kind.as_str(),
                change,
                c.rollback,
                timestamp(c.detected)
            ],
        )?;
        exec(
            tx,
            "UPDATE watches SET moves = MAX(moves, ?2), last_change = ?3 WHERE name = ?1",
            params![r.watch, c.seq as i64, timestamp(c.detected)],
        )?;
        exec(
            tx,
            "DELETE FROM changes WHERE watch = ?1 AND seq <= ?2",
            params![r.watch, c.seq as i64 - r.history as i64],
        )?;
    }
    let now = timestamp_millis(r.time);
    for a in &r.actions {
        // Only the newest target is built: older actions for the image that have not started yield
        // (waiting, held or awaiting approval alike).
        exec(
            tx,
            "UPDATE actions SET state = 'superseded', detail = ?3, updated = ?4
             WHERE image = ?1 AND state IN ('pending', 'held', 'awaiting_approval') AND change_id != ?2",
            params![a.image, a.change_id, format!("superseded by change {}", a.change_id), now],
        )?;
        let state = if a.needs_approval { ActionState::AwaitingApproval } else { ActionState::Pending };
        exec(
            tx,
            "INSERT INTO actions (change_id, image, key, kind, state, attempts, next_attempt, target, created, updated,
                                  wave, needs_approval)
             VALUES (?1, ?2, ?3, ?4, ?7, 0, ?5, ?6, ?5, ?5, ?8, ?9) ON CONFLICT (change_id, image) DO NOTHING",
            params![
                a.change_id,
                a.image,
                a.key,
                a.kind.as_str(),
                now,
                a.target.to_string(),
                state.as_str(),
                a.wave,
                a.needs_approval
            ],
        )?;
    }
    let change_id = r.change.as_ref().map(|c| c.id.as_str());
    insert_events(tx, &r.watch, r.time, &r.events, change_id, &r.deliveries, r.history)
}

/// Records a tag move and prunes the image's moves to the newest `history`.
fn insert_tag_move(tx: &Transaction<'_>, m: &TagMove, history: usize) -> Result<(), LedgerError> {
    exec(
        tx,
        "INSERT INTO tag_moves (image, reference, kind, action, before, after, time) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![m.image, m.reference, m.kind.as_str(), m.action, m.before, m.after, timestamp_millis(m.time)],
    )?;
    exec(
        tx,
        "DELETE FROM tag_moves WHERE image = ?1 AND seq NOT IN
             (SELECT seq FROM tag_moves WHERE image = ?1 ORDER BY seq DESC LIMIT ?2)",
        params![m.image, history.max(1) as i64],
    )?;
    Ok(())
}

/// Rows of `tag_moves` or `tag_intents`, whose columns have one shape: image, tag, kind, action
/// key, the digests before and after (expected and new, for an intent), time.
fn tag_rows(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    what: &'static str,
) -> Result<Vec<TagMove>, LedgerError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params, |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, Option<String>>(3)?,
            r.get::<_, Option<String>>(4)?,
            r.get::<_, Option<String>>(5)?,
            r.get::<_, Time>(6)?.0,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (image, reference, kind, action, before, after, time) = row?;
        let kind = TagMoveKind::parse(&kind)
            .ok_or_else(|| LedgerError::Corrupt { what, detail: format!("{image}: {kind}") })?;
        out.push(TagMove { image, reference, kind, action, before, after, time });
    }
    Ok(out)
}

/// Records events and their outbox rows, then prunes the watch's old events (never one that still
/// has a delivery to make).
fn insert_events(
    tx: &Transaction<'_>,
    watch: &str,
    now: DateTime<Utc>,
    events: &[Event],
    change_id: Option<&str>,
    deliveries: &[DeliveryKey],
    history: usize,
) -> Result<(), LedgerError> {
    for event in events {
        let document = serde_json::to_string(event).unwrap_or_default();
        let change = change_id.filter(|c| *c == event.id);
        exec(
            tx,
            "INSERT INTO events (id, type, watch, change_id, time, document) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (id) DO NOTHING",
            params![event.id, event.event_type.as_str(), watch, change, event.time, document],
        )?;
    }
    outbox::insert_deliveries(tx, events, deliveries, now)?;
    if !events.is_empty() {
        exec(
            tx,
            "DELETE FROM events WHERE watch = ?1
               AND seq NOT IN (SELECT seq FROM events WHERE watch = ?1 ORDER BY seq DESC LIMIT ?2)
               AND id NOT IN (SELECT event FROM deliveries WHERE state = 'pending')",
            params![watch, (history * 2) as i64],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use builder_monitor_core::event::{EventType, Subject};

    fn temp_ledger() -> (SqliteLedger, PathBuf) {
        let dir = std::env::temp_dir().join(format!("bm-ledger-{}-{}", std::process::id(), rand::random::<u64>()));
        let path = dir.join("state").join("ledger.db");
        (SqliteLedger::open(&path).unwrap(), dir)
    }

    fn record(time: &str) -> CheckRecord {
        CheckRecord {
            watch: "b".into(),
            kind: WatchKind::Builder,
            image: "docker.io/x/y:latest".into(),
            time: parse_timestamp(time).unwrap(),
            outcome: Ok(()),
            pin: None,
            pending: None,
            change: None,
            events: vec![],
            deliveries: vec![],
            actions: vec![],
            history: 2,
        }
    }

    fn pin(d: &str) -> PinUpdate {
        PinUpdate {
            digest: d.into(),
            reference: format!("docker.io/x/y@{d}"),
            media_type: "m".into(),
            platforms: [("linux/amd64".to_string(), format!("{d}-amd64"))].into(),
            metadata: None,
        }
    }

    fn change(seq: u64, prev: &str, cur: &str) -> ChangeRecord {
        ChangeRecord {
            id: builder_monitor_core::event::change_id("b", seq, prev, cur),
            watch: "b".into(),
            seq,
            previous: prev.into(),
            current: cur.into(),
            previous_reference: format!("docker.io/x/y@{prev}"),
            current_reference: format!("docker.io/x/y@{cur}"),
            change: Change::unknown("test"),
            rollback: false,
            detected: parse_timestamp(&format!("2026-11-30T12:0{seq}:00Z")).unwrap(),
        }
    }

    #[tokio::test]
    async fn pins_moves_failures_and_history() {
        let (ledger, dir) = temp_ledger();
        assert!(ledger.watch("b").await.unwrap().is_none());

        let mut r = record("2026-11-30T12:00:00Z");
        r.pin = Some(pin("sha256:a"));
        r.events.push(Event::new(
            "e1".into(),
            EventType::BuilderPinned,
            builder_monitor_core::schedule::timestamp(r.time),
            Subject { name: "b".into(), image: r.image.clone() },
        ));
        ledger.commit(r).await.unwrap();
        let w = ledger.watch("b").await.unwrap().unwrap();
        assert_eq!(w.pin.as_ref().unwrap().digest, "sha256:a");
        assert_eq!(w.pin.as_ref().unwrap().platforms["linux/amd64"], "sha256:a-amd64");
        assert_eq!(w.moves, 0);
        assert!(ledger.has_pinned("b", "sha256:a").await.unwrap());

        // Two failures count up and keep the pin; the first failure's time is kept.
        for t in ["2026-11-30T12:01:00Z", "2026-11-30T12:02:00Z"] {
            let mut r = record(t);
            r.outcome = Err(CheckFailure { reason: "tag_missing".into(), message: "gone".into() });
            ledger.commit(r).await.unwrap();
        }
        let w = ledger.watch("b").await.unwrap().unwrap();
        assert_eq!(w.consecutive_failures, 2);
        assert_eq!(w.failing_since.map(timestamp).as_deref(), Some("2026-11-30T12:01:00Z"));
        assert_eq!(w.last_ok, Some(false));
        assert_eq!(w.pin.as_ref().unwrap().digest, "sha256:a");

        // Three moves with history = 2: the oldest change is pruned, ids are kept.
        let moves = [("sha256:a", "sha256:b"), ("sha256:b", "sha256:c"), ("sha256:c", "sha256:d")];
        for (i, (prev, cur)) in moves.iter().enumerate() {
            let mut r = record(&format!("2026-11-30T12:1{i}:00Z"));
            r.pin = Some(pin(cur));
            r.change = Some(change(i as u64 + 1, prev, cur));
            ledger.commit(r).await.unwrap();
        }
        let w = ledger.watch("b").await.unwrap().unwrap();
        assert_eq!((w.moves, w.consecutive_failures, w.failing_since), (3, 0, None));
        let changes = ledger.changes(Some("b"), 10).await.unwrap();
        assert_eq!(changes.iter().map(|c| c.seq).collect::<Vec<_>>(), [3, 2]);
        assert_eq!(changes[0], change(3, "sha256:c", "sha256:d"));
        // Digest history keeps history + 1 pins.
        assert!(!ledger.has_pinned("b", "sha256:a").await.unwrap());
        assert!(ledger.has_pinned("b", "sha256:b").await.unwrap());

        // Recording the same change again changes nothing.
        let mut r = record("2026-11-30T12:20:00Z");
        r.change = Some(change(3, "sha256:c", "sha256:d"));
        ledger.commit(r).await.unwrap();
        assert_eq!(ledger.changes(None, 10).await.unwrap().len(), 2);

        let events = ledger.events_after(0, 10).await.unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event.id, "e1");
        drop(ledger);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The text each time column holds is the text the ledger has always stored: whole seconds for
    /// what people read, milliseconds for what orders work.
    #[tokio::test]
    async fn times_are_stored_as_they_always_were() {
        let (ledger, dir) = temp_ledger();
        let mut r = record("2026-11-30T12:00:00Z");
        r.pin = Some(pin("sha256:a"));
        ledger.commit(r).await.unwrap();
        let mut r = record("2026-11-30T12:10:00Z");
        r.pin = Some(pin("sha256:b"));
        r.change = Some(change(1, "sha256:a", "sha256:b"));
        r.outcome = Err(CheckFailure { reason: "tag_missing".into(), message: "gone".into() });
        r.pending =
            Some(HeldDigest { digest: "sha256:c".into(), since: parse_timestamp("2026-11-30T12:05:00Z").unwrap() });
        r.events.push(Event::new(
            "e1".into(),
            builder_monitor_core::event::EventType::BuilderChanged,
            "2026-11-30T12:10:00Z".into(),
            builder_monitor_core::event::Subject { name: "b".into(), image: r.image.clone() },
        ));
        r.deliveries.push(DeliveryKey::new("e1", "hook"));
        r.actions.push(NewAction {
            key: "k1".into(),
            change_id: "c1".into(),
            image: "app".into(),
            kind: ActionKind::Rebuild,
            target: serde_json::json!({}),
            wave: 1,
            needs_approval: false,
        });
        ledger.commit(r).await.unwrap();
        let at = |t: &str| parse_timestamp(t).unwrap();
        ledger.claim_actions(at("2026-11-30T12:10:01.5009Z"), 1, None, &Default::default()).await.unwrap();
        ledger
            .finish_action(ActionEnd {
                key: "k1",
                outcome: ActionOutcome::Retry { next_attempt: at("2026-11-30T12:15:00.1239Z") },
                detail: "exit status 1".into(),
                output_tail: String::new(),
                watch: "b",
                events: vec![],
                deliveries: vec![],
                history: 2,
                now: at("2026-11-30T12:10:02Z"),
                tag_move: None,
                hold: None,
                keep_intent: false,
            })
            .await
            .unwrap();
        let retry = DeliveryUpdate::Retry { next_attempt: at("2026-11-30T12:20:00Z"), status: "HTTP 503".into() };
        ledger.update_delivery("e1", "hook", retry, at("2026-11-30T12:11:00.25Z")).await.unwrap();
        let path = ledger.path().to_path_buf();
        drop(ledger);

        let conn = Connection::open(&path).unwrap();
        let text = |sql: &str| -> Vec<Option<String>> {
            conn.query_row(sql, [], |r| (0..r.as_ref().column_count()).map(|i| r.get(i)).collect()).unwrap()
        };
        let some = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
        assert_eq!(
            text(
                "SELECT pinned_since, first_seen, last_check, last_change, failing_since, pending_digest, pending_since FROM watches"
            ),
            some(&[
                "2026-11-30T12:10:00Z",
                "2026-11-30T12:00:00Z",
                "2026-11-30T12:10:00Z",
                "2026-11-30T12:01:00Z",
                "2026-11-30T12:10:00Z",
                "sha256:c",
                "2026-11-30T12:05:00Z"
            ])
        );
        assert_eq!(
            text("SELECT first_seen, last_pinned FROM digests WHERE digest = 'sha256:b'"),
            some(&["2026-11-30T12:10:00Z", "2026-11-30T12:10:00Z"])
        );
        assert_eq!(text("SELECT detected FROM changes"), some(&["2026-11-30T12:01:00Z"]));
        assert_eq!(
            text("SELECT state, next_attempt, created, updated FROM actions"),
            some(&["pending", "2026-11-30T12:15:00.123Z", "2026-11-30T12:10:00.000Z", "2026-11-30T12:10:02.000Z"])
        );
        assert_eq!(
            text("SELECT state, next_attempt, created, updated FROM deliveries"),
            some(&["pending", "2026-11-30T12:20:00.000Z", "2026-11-30T12:10:00.000Z", "2026-11-30T12:11:00.250Z"])
        );
        drop(conn);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn reopening_keeps_state_and_refuses_newer_schemas() {
        let (ledger, dir) = temp_ledger();
        let path = ledger.path().to_path_buf();
        let mut r = record("2026-11-30T12:00:00Z");
        r.pin = Some(pin("sha256:a"));
        ledger.commit(r).await.unwrap();
        drop(ledger);
        let again = SqliteLedger::open(&path).unwrap();
        assert_eq!(again.watch("b").await.unwrap().unwrap().pin.unwrap().digest, "sha256:a");
        drop(again);
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        let err = SqliteLedger::open(&path).err().unwrap();
        assert!(err.to_string().contains("schema version 99"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

//! Tag writes in the SQLite ledger: the `tag_moves` of app images, and the write-ahead
//! `tag_intents` — the intent recorded before a tag PUT (or before a runner's command that pushes),
//! found again after a crash — with the supersession check an action makes before it writes.

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::{SqliteLedger, Time, all, exec, row};
use chrono::{DateTime, Utc};

use crate::ledger::{ActionState, DeliveryKey, LedgerError, TagIntent, TagMove, TagMoveKind, TagWrites, WriteGrant};
use builder_monitor_core::event::Event;
use builder_monitor_core::schedule::timestamp_millis;

/// Migration 13 (see `MIGRATIONS`): who asked for a rollback, on its move and its intent; the
/// run image each move left the app on.
pub(super) const MIGRATION_BY: &str = r#"
    ALTER TABLE tag_moves ADD COLUMN requested_by TEXT;
    ALTER TABLE tag_intents ADD COLUMN requested_by TEXT;
    ALTER TABLE tag_moves ADD COLUMN run_image TEXT;
    "#;

/// Migration 6 (see `MIGRATIONS`).
pub(super) const MIGRATION: &str = r#"
    ALTER TABLE digests ADD COLUMN platforms TEXT NOT NULL DEFAULT '[]';
    CREATE TABLE tag_intents (
        image TEXT PRIMARY KEY,
        reference TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('rebase', 'rebuild', 'rollback')),
        action TEXT,
        expected TEXT,
        new TEXT,
        time TEXT NOT NULL
    );
    "#;

/// The change of the newest action of another change recorded for the same image after action
/// `key`, if any: the change that supersedes it (its own change's deploy follows it, and does not).
pub(super) fn newer_change(conn: &Connection, key: &str) -> Result<Option<String>, LedgerError> {
    Ok(row(
        conn,
        "SELECT change_id FROM actions WHERE image = (SELECT image FROM actions WHERE key = ?1)
             AND change_id != (SELECT change_id FROM actions WHERE key = ?1)
             AND rowid > (SELECT rowid FROM actions WHERE key = ?1) ORDER BY rowid DESC LIMIT 1",
        params![key],
        |r| r.get("change_id"),
    )
    .optional()?)
}

/// Forgets the intent of action `key` (its attempt ended; what it wrote is in the same write).
pub(super) fn clear_action_intent(tx: &Transaction<'_>, key: &str) -> Result<(), LedgerError> {
    exec(tx, "DELETE FROM tag_intents WHERE action = ?1", params![key])?;
    Ok(())
}

/// Forgets the intent of a write made outside an action (`rollback`) on `image`.
pub(super) fn clear_image_intent(tx: &Transaction<'_>, image: &str) -> Result<(), LedgerError> {
    exec(tx, "DELETE FROM tag_intents WHERE image = ?1 AND action IS NULL", params![image])?;
    Ok(())
}

impl TagWrites for SqliteLedger {
    async fn begin_tag_write(&self, _watch: &str, intent: TagIntent) -> Result<WriteGrant, LedgerError> {
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(key) = &intent.action {
                let state: Option<String> =
                    row(&tx, "SELECT state FROM actions WHERE key = ?1", params![key], |r| r.get("state"))
                        .optional()?;
                if state.as_deref() != Some(ActionState::Running.as_str()) {
                    return Ok(WriteGrant::NotRunning);
                }
                if let Some(by) = newer_change(&tx, key)? {
                    return Ok(WriteGrant::Superseded { by });
                }
            }
            exec(
                &tx,
                "INSERT INTO tag_intents (image, reference, kind, action, expected, new, time, requested_by)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (image) DO UPDATE SET reference = excluded.reference, kind = excluded.kind,
                     action = excluded.action, expected = excluded.expected, new = excluded.new, time = excluded.time,
                     requested_by = excluded.requested_by",
                params![
                    intent.image,
                    intent.reference,
                    intent.kind.as_str(),
                    intent.action,
                    intent.expected,
                    intent.new,
                    timestamp_millis(intent.time),
                    intent.by
                ],
            )?;
            tx.commit()?;
            Ok(WriteGrant::Granted)
        })
        .await
    }

    async fn tag_intents(&self) -> Result<Vec<TagIntent>, LedgerError> {
        self.with(|conn| {
            // Read as the moves they become: the digest expected is the one before, the new one after.
            let rows = tag_rows(
                conn,
                "SELECT image, reference, kind, action, expected AS before, new AS after, time, requested_by,
                     NULL AS run_image FROM tag_intents
                 ORDER BY image",
                [],
                "tag intent kind",
            )?;
            Ok(rows
                .into_iter()
                .map(|m| TagIntent {
                    image: m.image,
                    reference: m.reference,
                    kind: m.kind,
                    action: m.action,
                    expected: m.before,
                    new: m.after,
                    time: m.time,
                    by: m.by,
                })
                .collect())
        })
        .await
    }

    async fn end_tag_write(&self, image: &str, action: Option<&str>) -> Result<(), LedgerError> {
        let (image, action) = (image.to_string(), action.map(str::to_string));
        self.with(move |conn| {
            exec(conn, "DELETE FROM tag_intents WHERE image = ?1 AND action IS ?2", params![image, action])?;
            Ok(())
        })
        .await
    }

    async fn record_tag_move(&self, _watch: &str, tag_move: TagMove, history: usize) -> Result<(), LedgerError> {
        self.with(move |conn| {
            let tx = conn.transaction()?;
            insert_tag_move(&tx, &tag_move, history)?;
            clear_image_intent(&tx, &tag_move.image)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn record_rollback(
        &self,
        watch: &str,
        tag_move: TagMove,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let watch = watch.to_string();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            insert_tag_move(&tx, &tag_move, history)?;
            clear_image_intent(&tx, &tag_move.image)?;
            super::outbox::insert_events(&tx, &watch, now, &events, None, &deliveries, history)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn tag_moves(&self, image: Option<&str>, limit: usize) -> Result<Vec<TagMove>, LedgerError> {
        let image = image.map(str::to_string);
        self.with(move |conn| {
            tag_rows(
                conn,
                "SELECT image, reference, kind, action, before, after, time, requested_by, run_image FROM tag_moves
                 WHERE (?1 IS NULL OR image = ?1) ORDER BY seq DESC LIMIT ?2",
                params![image, limit as i64],
                "tag move kind",
            )
        })
        .await
    }
}

/// Records a tag move and prunes the image's moves to the newest `history`.
pub(super) fn insert_tag_move(tx: &Transaction<'_>, m: &TagMove, history: usize) -> Result<(), LedgerError> {
    exec(
        tx,
        "INSERT INTO tag_moves (image, reference, kind, action, before, after, time, requested_by, run_image)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            m.image,
            m.reference,
            m.kind.as_str(),
            m.action,
            m.before,
            m.after,
            timestamp_millis(m.time),
            m.by,
            m.run_image
        ],
    )?;
    exec(
        tx,
        "DELETE FROM tag_moves WHERE image = ?1 AND seq NOT IN
             (SELECT seq FROM tag_moves WHERE image = ?1 ORDER BY seq DESC LIMIT ?2)",
        params![m.image, history.max(1) as i64],
    )?;
    Ok(())
}

/// Rows of `tag_moves`, or of `tag_intents` with their digests as `before` and `after`: image,
/// tag, kind, action key, the digests before and after, time, who asked.
fn tag_rows(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    what: &'static str,
) -> Result<Vec<TagMove>, LedgerError> {
    all(conn, sql, params, |r| {
        let image: String = r.get("image")?;
        let kind: String = r.get("kind")?;
        let kind = TagMoveKind::parse(&kind)
            .ok_or_else(|| LedgerError::Corrupt { what, detail: format!("{image}: {kind}") })?;
        Ok(TagMove {
            reference: r.get("reference")?,
            kind,
            action: r.get("action")?,
            before: r.get("before")?,
            after: r.get("after")?,
            time: r.get::<_, Time>("time")?.0,
            by: r.get("requested_by")?,
            run_image: r.get("run_image")?,
            image,
        })
    })
}

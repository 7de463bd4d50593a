//! Checks and pins in SQLite: the `watches` row of each watch, its pinned `digests` and its
//! `changes`.

use std::collections::BTreeMap;

use rusqlite::{OptionalExtension, Row, Transaction, params};

use super::{SqliteLedger, Time, actions, all, exec, first, outbox, row};
use crate::ledger::{
    ChangeRecord, CheckFailure, CheckRecord, Checks, HeldDigest, LedgerError, PinMetadata, PinRecord, PinSummary,
    PinnedDigest, Touch, WatchKind, WatchRecord,
};
use builder_monitor_core::schedule::{timestamp, timestamp_millis};

/// The columns [`watch_record`] reads.
const WATCH_COLUMNS: &str = "name, kind, image, digest, reference, media_type, platforms, metadata, pinned_since,
     first_seen, last_check, last_result, last_error_reason, last_error, last_change, consecutive_failures,
     failing_since, pending_digest, pending_since, moves, failure_runs";

/// Every pin, whether it is steady, and its run image: every column is in `watches_pins`, so no
/// row (nor its metadata) is read.
pub(super) const PINS_SQL: &str = "SELECT name, kind, image, digest, run_image,
        last_check IS NOT NULL AND last_result = 'ok' AND consecutive_failures = 0
        AND failing_since IS NULL AND last_error_reason IS NULL AND last_error IS NULL
        AND pending_digest IS NULL AS steady
    FROM watches ORDER BY name";

/// The failing watches, from `watches_failing` (a partial index): each registry's first checks of a
/// term read them, and a scan would read every row, metadata and all.
pub(super) const FAILING: &str = "FROM watches WHERE consecutive_failures > 0 ORDER BY name";

impl Checks for SqliteLedger {
    async fn watch(&self, name: &str) -> Result<Option<WatchRecord>, LedgerError> {
        let name = name.to_string();
        self.with(move |conn| {
            first(conn, &format!("SELECT {WATCH_COLUMNS} FROM watches WHERE name = ?1"), params![name], watch_record)
        })
        .await
    }

    async fn watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        self.with(|conn| all(conn, &format!("SELECT {WATCH_COLUMNS} FROM watches ORDER BY name"), [], watch_record))
            .await
    }

    async fn failing_watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        self.with(|conn| {
            let sql = format!("SELECT {WATCH_COLUMNS} {FAILING}");
            all(conn, &sql, [], watch_record)
        })
        .await
    }

    async fn pins(&self) -> Result<Vec<PinSummary>, LedgerError> {
        self.with(|conn| {
            let sql = PINS_SQL;
            all(conn, sql, [], |r| {
                // By position: a name costs a lookup per column per row, 10,000 rows at start-up.
                Ok(PinSummary {
                    name: r.get(0)?,
                    kind: watch_kind(&r.get::<_, String>(1)?),
                    image: r.get(2)?,
                    digest: r.get(3)?,
                    run_image: r.get(4)?,
                    steady: r.get(5)?,
                })
            })
        })
        .await
    }

    async fn has_pinned(&self, watch: &str, digest: &str) -> Result<bool, LedgerError> {
        let (watch, digest) = (watch.to_string(), digest.to_string());
        self.with(move |conn| {
            Ok(row(conn, "SELECT 1 FROM digests WHERE watch = ?1 AND digest = ?2", params![watch, digest], |_| Ok(()))
                .optional()?
                .is_some())
        })
        .await
    }

    async fn history(&self, watch: &str, limit: usize) -> Result<Vec<PinnedDigest>, LedgerError> {
        let watch = watch.to_string();
        self.with(move |conn| {
            all(
                conn,
                "SELECT digest, first_seen, platforms FROM digests WHERE watch = ?1
                 ORDER BY last_pinned DESC, rowid DESC LIMIT ?2",
                params![watch, limit as i64],
                |r| {
                    let platforms: String = r.get("platforms")?;
                    Ok(PinnedDigest {
                        digest: r.get("digest")?,
                        first_seen: r.get::<_, Time>("first_seen")?.0,
                        platforms: serde_json::from_str(&platforms).unwrap_or_default(),
                    })
                },
            )
        })
        .await
    }

    async fn touch(&self, touches: &[Touch]) -> Result<(), LedgerError> {
        let touches = touches.to_vec();
        self.with(move |conn| {
            let tx = conn.transaction()?;
            touch_checks(&tx, &touches)?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn commit(&self, record: CheckRecord, touches: &[Touch]) -> Result<(), LedgerError> {
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

    async fn changes(&self, watch: Option<&str>, limit: usize) -> Result<Vec<ChangeRecord>, LedgerError> {
        let watch = watch.map(str::to_string);
        self.with(move |conn| {
            all(
                conn,
                "SELECT id, watch, seq, previous, current, previous_reference, current_reference, change, rollback, detected
                 FROM changes WHERE (?1 IS NULL OR watch = ?1) ORDER BY detected DESC, seq DESC LIMIT ?2",
                params![watch, limit as i64],
                change_record,
            )
        })
        .await
    }
}

fn watch_kind(kind: &str) -> WatchKind {
    if kind == "run_image" { WatchKind::RunImage } else { WatchKind::Builder }
}

/// A [`WatchRecord`] from a row of [`WATCH_COLUMNS`]. Its metadata is checked to be JSON, not
/// decoded (see [`PinMetadata`]).
fn watch_record(r: &Row<'_>) -> Result<WatchRecord, LedgerError> {
    let name: String = r.get(col!(WATCH_COLUMNS, "name"))?;
    let corrupt = |what, detail: String| LedgerError::Corrupt { what, detail: format!("watch {name}: {detail}") };
    let platforms: String = r.get(col!(WATCH_COLUMNS, "platforms"))?;
    let platforms: BTreeMap<String, String> =
        serde_json::from_str(&platforms).map_err(|e| corrupt("platform map", e.to_string()))?;
    let metadata = r
        .get::<_, Option<String>>(col!(WATCH_COLUMNS, "metadata"))?
        .map(PinMetadata::stored)
        .transpose()
        .map_err(|e| corrupt("metadata", e.to_string()))?;
    let first_seen = r.get::<_, Time>(col!(WATCH_COLUMNS, "first_seen"))?.0;
    let pin = match (
        r.get::<_, Option<String>>(col!(WATCH_COLUMNS, "digest"))?,
        r.get::<_, Option<String>>(col!(WATCH_COLUMNS, "reference"))?,
    ) {
        (Some(digest), Some(reference)) => Some(PinRecord {
            digest,
            reference,
            media_type: r.get::<_, Option<String>>(col!(WATCH_COLUMNS, "media_type"))?.unwrap_or_default(),
            platforms,
            since: r.get::<_, Option<Time>>(col!(WATCH_COLUMNS, "pinned_since"))?.map_or(first_seen, |t| t.0),
        }),
        _ => None,
    };
    let pending = r
        .get::<_, Option<String>>(col!(WATCH_COLUMNS, "pending_digest"))?
        .zip(r.get::<_, Option<Time>>(col!(WATCH_COLUMNS, "pending_since"))?);
    Ok(WatchRecord {
        kind: watch_kind(&r.get::<_, String>(col!(WATCH_COLUMNS, "kind"))?),
        image: r.get(col!(WATCH_COLUMNS, "image"))?,
        pin,
        metadata,
        first_seen,
        last_check: r.get::<_, Option<Time>>(col!(WATCH_COLUMNS, "last_check"))?.map(|t| t.0),
        last_ok: r.get::<_, Option<String>>(col!(WATCH_COLUMNS, "last_result"))?.map(|r| r == "ok"),
        last_error_reason: r.get(col!(WATCH_COLUMNS, "last_error_reason"))?,
        last_error: r.get(col!(WATCH_COLUMNS, "last_error"))?,
        last_change: r.get::<_, Option<Time>>(col!(WATCH_COLUMNS, "last_change"))?.map(|t| t.0),
        consecutive_failures: r.get::<_, i64>(col!(WATCH_COLUMNS, "consecutive_failures"))?.max(0) as u32,
        failing_since: r.get::<_, Option<Time>>(col!(WATCH_COLUMNS, "failing_since"))?.map(|t| t.0),
        pending: pending.map(|(digest, since)| HeldDigest { digest, since: since.0 }),
        moves: r.get::<_, i64>(col!(WATCH_COLUMNS, "moves"))?.max(0) as u64,
        failure_runs: r.get::<_, i64>(col!(WATCH_COLUMNS, "failure_runs"))?.max(0) as u64,
        name,
    })
}

/// A [`ChangeRecord`] from a row of `changes`.
fn change_record(r: &Row<'_>) -> Result<ChangeRecord, LedgerError> {
    let id: String = r.get("id")?;
    let change: String = r.get("change")?;
    let change = serde_json::from_str(&change)
        .map_err(|e| LedgerError::Corrupt { what: "change", detail: format!("{id}: {e}") })?;
    Ok(ChangeRecord {
        watch: r.get("watch")?,
        seq: r.get::<_, i64>("seq")? as u64,
        previous: r.get("previous")?,
        current: r.get("current")?,
        previous_reference: r.get("previous_reference")?,
        current_reference: r.get("current_reference")?,
        change,
        rollback: r.get("rollback")?,
        detected: r.get::<_, Time>("detected")?.0,
        id,
    })
}

/// A pin's platform manifest digests, as the `digests.platforms` column keeps them (a JSON list).
fn platform_digests(platforms: &BTreeMap<String, String>) -> String {
    let mut digests: Vec<&String> = platforms.values().collect();
    digests.sort();
    digests.dedup();
    serde_json::to_string(&digests).unwrap_or_else(|_| "[]".into())
}

/// A touch moves only `last_check`, forward, on a succeeding entry of the same image: whatever was
/// committed since it was taken wins.
fn touch_checks(tx: &Transaction<'_>, touches: &[Touch]) -> Result<(), LedgerError> {
    for t in touches {
        exec(
            tx,
            "UPDATE watches SET last_check = ?2
             WHERE name = ?1 AND image = ?3 AND last_result = 'ok' AND (last_check IS NULL OR last_check < ?2)",
            params![&*t.watch, timestamp(t.time), &*t.image],
        )?;
    }
    Ok(())
}

fn commit_check(tx: &Transaction<'_>, r: &CheckRecord) -> Result<(), LedgerError> {
    let time = timestamp(r.time);
    // Failure runs are counted per image, as the check counts them (`decide`): a new entry or
    // image starts at none.
    let before: Option<String> =
        row(tx, "SELECT image FROM watches WHERE name = ?1", params![r.watch], |r| r.get("image")).optional()?;
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
        let metadata = pin.metadata.as_ref().and_then(PinMetadata::to_json);
        let run_image = metadata.as_ref().and(pin.metadata.as_ref()).and_then(PinMetadata::run_image);
        exec(tx,
            "UPDATE watches SET digest = ?2, reference = ?3, media_type = ?4, platforms = ?5, metadata = ?6, pinned_since = ?7,
                 run_image = ?8
             WHERE name = ?1",
            params![r.watch, pin.digest, pin.reference, pin.media_type, platforms, metadata.as_deref(), time, run_image],
        )?;
        exec(
            tx,
            "INSERT INTO digests (watch, digest, first_seen, last_pinned, platforms) VALUES (?1, ?2, ?3, ?3, ?4)
             ON CONFLICT (watch, digest) DO UPDATE SET last_pinned = excluded.last_pinned, platforms = excluded.platforms",
            params![r.watch, pin.digest, time, platform_digests(&pin.platforms)],
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
    actions::insert_actions(tx, &r.actions, timestamp_millis(r.time))?;
    let change_id = r.change.as_ref().map(|c| c.id.as_str());
    outbox::insert_events(tx, &r.watch, r.time, &r.events, change_id, &r.deliveries, r.history)
}

/// Migration 10's step: each entry's run image name from its metadata, decoded once here so
/// start-up never decodes it again. Metadata that does not read leaves the name unknown, as it
/// leaves the run image unwatched.
pub(super) fn backfill_run_images(tx: &Transaction<'_>) -> Result<(), LedgerError> {
    let rows: Vec<(String, String)> =
        all(tx, "SELECT name, metadata FROM watches WHERE metadata IS NOT NULL", [], |r| {
            Ok((r.get("name")?, r.get("metadata")?))
        })?;
    for (name, metadata) in rows {
        let run_image = PinMetadata::stored(metadata).ok().and_then(|m| m.run_image());
        if run_image.is_some() {
            exec(tx, "UPDATE watches SET run_image = ?2 WHERE name = ?1", params![name, run_image])?;
        }
    }
    Ok(())
}

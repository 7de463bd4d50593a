//! Write-ahead tag writes in the SQLite ledger: the intent recorded before a tag PUT (or before a
//! runner's command that pushes), found again after a crash, and the supersession check an action
//! makes before it writes.

use super::*;

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

/// A pin's platform manifest digests, as the `digests.platforms` column keeps them (a JSON list).
pub(super) fn platform_digests(platforms: &BTreeMap<String, String>) -> String {
    let mut digests: Vec<&String> = platforms.values().collect();
    digests.sort();
    digests.dedup();
    serde_json::to_string(&digests).unwrap_or_else(|_| "[]".into())
}

/// The change of the newest action recorded for the same image after action `key`, if any: the
/// change that supersedes it.
pub(super) fn newer_change(conn: &Connection, key: &str) -> Result<Option<String>, LedgerError> {
    Ok(row(
        conn,
        "SELECT change_id FROM actions WHERE image = (SELECT image FROM actions WHERE key = ?1)
             AND rowid > (SELECT rowid FROM actions WHERE key = ?1) ORDER BY rowid DESC LIMIT 1",
        params![key],
        |r| r.get(0),
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

impl SqliteLedger {
    /// Records `intent` before its write, unless its action was superseded or is not running.
    pub async fn begin_tag_write(&self, intent: TagIntent) -> Result<WriteGrant, LedgerError> {
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(key) = &intent.action {
                let state: Option<String> =
                    row(&tx, "SELECT state FROM actions WHERE key = ?1", params![key], |r| r.get(0)).optional()?;
                if state.as_deref() != Some(ActionState::Running.as_str()) {
                    return Ok(WriteGrant::NotRunning);
                }
                if let Some(by) = newer_change(&tx, key)? {
                    return Ok(WriteGrant::Superseded { by });
                }
            }
            exec(
                &tx,
                "INSERT INTO tag_intents (image, reference, kind, action, expected, new, time)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (image) DO UPDATE SET reference = excluded.reference, kind = excluded.kind,
                     action = excluded.action, expected = excluded.expected, new = excluded.new, time = excluded.time",
                params![
                    intent.image,
                    intent.reference,
                    intent.kind.as_str(),
                    intent.action,
                    intent.expected,
                    intent.new,
                    timestamp_millis(intent.time)
                ],
            )?;
            tx.commit()?;
            Ok(WriteGrant::Granted)
        })
        .await
    }

    /// Every intent whose write has not been recorded as done (or as not done) yet.
    pub async fn tag_intents(&self) -> Result<Vec<TagIntent>, LedgerError> {
        self.with(|conn| {
            let rows = tag_rows(
                conn,
                "SELECT image, reference, kind, action, expected, new, time FROM tag_intents ORDER BY image",
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
                })
                .collect())
        })
        .await
    }

    /// Forgets the open intent on `image` (of action `action`, or of a rollback when `None`): its
    /// write did not happen.
    pub async fn end_tag_write(&self, image: &str, action: Option<&str>) -> Result<(), LedgerError> {
        let (image, action) = (image.to_string(), action.map(str::to_string));
        self.with(move |conn| {
            exec(conn, "DELETE FROM tag_intents WHERE image = ?1 AND action IS ?2", params![image, action])?;
            Ok(())
        })
        .await
    }

    /// The target of the newest succeeded action of `kind` for `image` (what the app was last
    /// built or rebased with).
    pub async fn last_succeeded_target(
        &self,
        image: &str,
        kind: ActionKind,
    ) -> Result<Option<serde_json::Value>, LedgerError> {
        let image = image.to_string();
        self.with(move |conn| {
            let text: Option<String> = row(
                conn,
                "SELECT target FROM actions WHERE image = ?1 AND kind = ?2 AND state = 'succeeded'
                 ORDER BY updated DESC, rowid DESC LIMIT 1",
                params![image, kind.as_str()],
                |r| r.get(0),
            )
            .optional()?;
            text.map(|t| {
                serde_json::from_str(&t)
                    .map_err(|e| LedgerError::Corrupt { what: "action target", detail: format!("{image}: {e}") })
            })
            .transpose()
        })
        .await
    }
}

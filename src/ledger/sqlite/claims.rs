//! Claims that read what they take, not every action of every open change. When nothing holds
//! every action back (no freeze, a window open) and no roll-out rule needs a change's whole picture
//! (no `max_in_flight`, no soak), a pending action's gate is its change's lowest wave not done,
//! which an index answers; so a claim walks the pending actions in the order `gate_rows` gives them
//! (due, created, key) and stops at its limit. For a fleet's change of 10,000 actions that is a few
//! rows per claim instead of all of them. The verdicts are `gate_rows`' (the tests below compare
//! the two on random ledgers); anything else takes the whole picture (`actions::gated_pending`).

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use super::{Time, row};
use crate::ledger::LedgerError;
use crate::ledger::actions::{ImageLocks, Kinds};
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::rollout::{ActionState, Freeze, Rollout};

/// Whether a claim at `now` under `rollout` and `freeze` may go by each change's lowest wave not
/// done alone.
pub(super) fn streams(rollout: &Rollout, freeze: Option<&Freeze>, now: DateTime<Utc>) -> bool {
    freeze.is_none() && rollout.windows.is_open(now) && rollout.max_in_flight.is_none() && rollout.soak.is_zero()
}

/// The first `limit` pending actions of `kinds` that may start by their change's waves, their
/// image's hold and the one action per image at a time, in claim order, each with when it is due;
/// `due_by`: only those due by then. Only where [`streams`] says so.
pub(super) fn first_startable(
    conn: &Connection,
    kinds: Kinds,
    locks: &ImageLocks,
    due_by: Option<DateTime<Utc>>,
    limit: usize,
) -> Result<Vec<(String, DateTime<Utc>)>, LedgerError> {
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    let mut busy = locks.running.clone();
    let mut lowest: std::collections::HashMap<String, Option<u32>> = Default::default();
    let mut stmt = conn.prepare_cached(
        // Named: with no statistics the planner takes `actions_due` and sorts every pending row.
        "SELECT key, change_id, image, kind, next_attempt, created, wave, released FROM actions
         INDEXED BY actions_pending WHERE state = 'pending' ORDER BY next_attempt, created, key",
    )?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let due: Time = r.get("next_attempt")?;
        if due_by.is_some_and(|by| due.0 > by) {
            break;
        }
        let kind: String = r.get("kind")?;
        if !ActionKind::parse(&kind).is_some_and(|k| kinds.contains(k)) {
            continue;
        }
        let (change, wave, released): (String, u32, bool) = (r.get("change_id")?, r.get("wave")?, r.get("released")?);
        if !released {
            let lowest = match lowest.get(&change) {
                Some(l) => *l,
                None => {
                    let l = lowest_not_done(conn, &change)?;
                    lowest.insert(change.clone(), l);
                    l
                }
            };
            if lowest.is_some_and(|l| l < wave) {
                continue;
            }
        }
        let image: String = r.get("image")?;
        let created: Time = r.get("created")?;
        if let Some((_, since)) = locks.held.get(&image)
            && created.0 <= *since
            && !released
        {
            continue;
        }
        if busy.contains_key(&image) {
            continue;
        }
        busy.insert(image, change);
        out.push((r.get("key")?, due.0));
        if out.len() == limit {
            break;
        }
    }
    Ok(out)
}

/// The lowest wave of `change` with an action not done (neither succeeded, superseded nor
/// skipped): one index seek per such state.
fn lowest_not_done(conn: &Connection, change: &str) -> Result<Option<u32>, LedgerError> {
    let sql = NOT_DONE_SQL.get_or_init(|| {
        let seeks: Vec<String> = ActionState::ALL
            .iter()
            .filter(|s| !matches!(s, ActionState::Succeeded | ActionState::Superseded | ActionState::Skipped))
            .map(|s| {
                format!("SELECT (SELECT MIN(wave) FROM actions WHERE change_id = ?1 AND state = '{}') AS w", s.as_str())
            })
            .collect();
        format!("SELECT MIN(w) FROM ({})", seeks.join(" UNION ALL "))
    });
    Ok(row(conn, sql, params![change], |r| r.get::<_, Option<u32>>(0))?)
}

static NOT_DONE_SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

#[cfg(test)]
mod tests;

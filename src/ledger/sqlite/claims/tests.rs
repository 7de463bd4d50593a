//! The streamed claim against `gate_rows` on random ledgers: the same actions, in the same order,
//! for every limit, and the same next start.

use chrono::{DateTime, Duration, Utc};
use rusqlite::{Connection, params};

use super::*;
use crate::ledger::actions::next_start;
use crate::ledger::sqlite::actions::{gated_pending, image_locks};
use builder_monitor_core::schedule::{parse_timestamp, timestamp_millis};

/// xorshift64: the same scenarios on every run, no dependency.
struct Random(u64);

impl Random {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn scenario(conn: &Connection, random: &mut Random, now: DateTime<Utc>) {
    conn.execute("DELETE FROM actions", []).unwrap();
    let kinds = ["rebase", "rebuild", "deploy"];
    let offsets = [-120, -60, 0, 60];
    for change in 0..1 + random.below(3) {
        for _ in 0..random.below(14) {
            let state = ActionState::ALL[random.below(ActionState::ALL.len() as u64) as usize];
            // Pending half the time: the interesting rows.
            let state = if random.below(2) == 0 { ActionState::Pending } else { state };
            let at = |r: &mut Random| timestamp_millis(now + Duration::seconds(offsets[r.below(4) as usize]));
            conn.execute(
                "INSERT OR IGNORE INTO actions (change_id, image, key, kind, state, attempts, next_attempt, target,
                     created, updated, wave, needs_approval, released, holds)
                 VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, '{}', ?7, ?8, ?9, 0, ?10, ?11)",
                params![
                    format!("c{change}"),
                    format!("app-{}", random.below(6)),
                    format!("k{}", random.below(1 << 30)),
                    kinds[random.below(3) as usize],
                    state.as_str(),
                    at(random),
                    at(random),
                    at(random),
                    random.below(3) as i64,
                    random.below(5) == 0,
                    random.below(8) == 0,
                ],
            )
            .unwrap();
        }
    }
}

#[test]
fn streamed_claims_match_the_whole_gate_on_random_ledgers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    drop(crate::ledger::sqlite::SqliteLedger::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    let now = parse_timestamp("2026-12-02T09:00:00.000Z").unwrap();
    let rollout = Rollout::default();
    assert!(streams(&rollout, None, now));
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let mut claimed_some = 0;
    for _ in 0..400 {
        scenario(&conn, &mut random, now);
        for kinds in [Kinds::ALL, Kinds::from(ActionKind::Rebase), Kinds::from(ActionKind::Deploy)] {
            let gated = gated_pending(&conn, kinds, &rollout, None, now).unwrap();
            let whole: Vec<String> =
                gated.iter().filter(|g| g.verdict.is_ok() && g.due <= now).map(|g| g.key.clone()).collect();
            let locks = image_locks(&conn).unwrap();
            for limit in [1, 2, 100] {
                let streamed: Vec<String> = first_startable(&conn, kinds, &locks, Some(now), limit)
                    .unwrap()
                    .into_iter()
                    .map(|(key, _)| key)
                    .collect();
                assert_eq!(streamed, whole.iter().take(limit).cloned().collect::<Vec<_>>(), "limit {limit}");
            }
            claimed_some += usize::from(!whole.is_empty());
            let next = first_startable(&conn, kinds, &locks, None, 1).unwrap().first().map(|(_, due)| *due);
            assert_eq!(next, next_start(gated, &rollout, None, now));
        }
    }
    assert!(claimed_some > 100, "the scenarios claim something often enough to say something: {claimed_some}");
}

//! When each watch's check is next due (a timetable over every watch, random jitter, per-registry
//! check slots) and the daemon's clock, which tests anchor to tokio's.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use builder_monitor_core::schedule::Schedule;
use chrono::{DateTime, Utc};
use rand::Rng;
use tokio::time::Instant;

/// A random delay in `[0, max]`, spreading checks so they do not hit a registry together.
pub fn jitter(max: Duration, rng: &mut impl Rng) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    Duration::from_nanos(rng.random_range(0..=max.as_nanos().min(u64::MAX as u128) as u64))
}

/// `now + by`, saturating far in the future instead of overflowing (config bounds keep `by` within
/// a few years; this keeps a value that slipped past them from stopping the scheduler).
fn later(now: Instant, by: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(100 * 365 * 86_400);
    now.checked_add(by.min(FAR)).or_else(|| now.checked_add(Duration::from_secs(86_400))).unwrap_or(now)
}

/// When each watch is next due, so that one task can time them all: a sleeping task per watch
/// costs about a kilobyte, which thousands of watches add up to. Pure: callers pass the time in.
///
/// A watch is first due after a random jitter, then `schedule.delay_after` plus jitter after each
/// check finishes (checks of one watch never overlap). A wake makes it due at once; a wake during
/// its check makes it due again as soon as that check ends, so a push that lands mid-check is seen.
pub struct Timetable<T> {
    entries: Vec<Entry<T>>,
    /// Box<str>: 8 bytes less a watch than String, for the daemon's life.
    by_name: HashMap<Box<str>, usize>,
    /// (due, entry, generation); entries re-queued since carry a newer generation and win.
    queue: BinaryHeap<Reverse<(Instant, usize, u64)>>,
}

struct Entry<T> {
    item: T,
    state: State,
    generation: u64,
}

/// The first retry of a failed check comes this soon; each further failure doubles it, and a
/// watch's own schedule is never exceeded: a registry back after a blip is seen within a minute,
/// not an hour later, while a long outage costs a watch ~one request per interval again.
pub const FIRST_RETRY: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Running {
        woken: bool,
    },
    /// A schedule with no future firing: only wakes check it.
    Idle,
    Removed,
}

impl<T> Default for Timetable<T> {
    fn default() -> Self {
        Timetable { entries: Vec::new(), by_name: HashMap::new(), queue: BinaryHeap::new() }
    }
}

impl<T> Timetable<T> {
    /// Adds a watch, first due within `jitter_max` of `now`; a name already present keeps its entry.
    pub fn add(&mut self, name: &str, item: T, jitter_max: Duration, now: Instant) -> usize {
        if let Some(&id) = self.by_name.get(name)
            && self.entries[id].state != State::Removed
        {
            return id;
        }
        let id = self.entries.len();
        self.entries.push(Entry { item, state: State::Waiting, generation: 0 });
        self.by_name.insert(name.into(), id);
        self.queue.push(Reverse((later(now, jitter(jitter_max, &mut rand::rng())), id, 0)));
        id
    }

    pub fn id(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied().filter(|&id| self.entries[id].state != State::Removed)
    }

    pub fn item(&self, id: usize) -> &T {
        &self.entries[id].item
    }

    /// No more checks; a check running now finishes but is not rescheduled.
    pub fn remove(&mut self, id: usize) {
        self.entries[id].state = State::Removed;
    }

    fn requeue(&mut self, id: usize, due: Instant) {
        let entry = &mut self.entries[id];
        entry.generation += 1;
        entry.state = State::Waiting;
        self.queue.push(Reverse((due, id, entry.generation)));
    }

    /// Check now: at once when waiting, right after the check in progress when running.
    pub fn wake(&mut self, id: usize, now: Instant) {
        match self.entries[id].state {
            State::Waiting | State::Idle => self.requeue(id, now),
            State::Running { .. } => self.entries[id].state = State::Running { woken: true },
            State::Removed => {}
        }
    }

    /// When the earliest waiting watch is due.
    pub fn next_due(&mut self) -> Option<Instant> {
        while let Some(&Reverse((due, id, generation))) = self.queue.peek() {
            let entry = &self.entries[id];
            if entry.generation == generation && entry.state == State::Waiting {
                return Some(due);
            }
            self.queue.pop();
        }
        None
    }

    /// A watch due at `now`, now marked running.
    pub fn pop_due(&mut self, now: Instant) -> Option<usize> {
        let due = self.next_due()?;
        if due > now {
            return None;
        }
        let Reverse((_, id, _)) = self.queue.pop()?;
        self.entries[id].state = State::Running { woken: false };
        Some(id)
    }

    /// Its check ended: schedules the next one. False when the schedule has no future firing.
    pub fn finished(
        &mut self,
        id: usize,
        schedule: &Schedule,
        jitter_max: Duration,
        now: Instant,
        wall: DateTime<Utc>,
    ) -> bool {
        let scheduled = schedule.delay_after(wall).map(|d| d.saturating_add(jitter(jitter_max, &mut rand::rng())));
        self.next_in(id, scheduled, now)
    }

    /// Its check failed: the next attempt comes after `delay`, which the check decided (and
    /// logged) with [`after_failure`]; none when the schedule has no future firing (false then).
    pub fn failed(&mut self, id: usize, delay: Option<Duration>, now: Instant) -> bool {
        self.next_in(id, delay, now)
    }

    /// Requeues a watch whose check ended: at once when woken meanwhile, else after `delay`.
    fn next_in(&mut self, id: usize, delay: Option<Duration>, now: Instant) -> bool {
        match self.entries[id].state {
            State::Running { woken: true } => self.requeue(id, now),
            State::Running { woken: false } => match delay {
                Some(delay) => self.requeue(id, later(now, delay)),
                None => {
                    self.entries[id].state = State::Idle;
                    return false;
                }
            },
            State::Waiting | State::Idle | State::Removed => {}
        }
        true
    }
}

/// When the attempt after a failed check comes, the `failures`-th in a row (the ledger's count,
/// this one included): [`FIRST_RETRY`] doubled for each failure before it, with up to a quarter
/// of it as jitter, or the schedule's next check (with its jitter) if that is sooner. One function
/// for the check, which logs the time, and the timetable, which keeps it. `None` when the schedule
/// has no future firing.
pub fn after_failure(
    failures: u32,
    schedule: &Schedule,
    jitter_max: Duration,
    wall: DateTime<Utc>,
) -> Option<Duration> {
    let rng = &mut rand::rng();
    let scheduled = schedule.delay_after(wall)?.saturating_add(jitter(jitter_max, rng));
    let retry = FIRST_RETRY.saturating_mul(1 << failures.saturating_sub(1).min(16));
    let retry = retry.saturating_add(jitter(retry / 4, rng));
    Some(retry.min(scheduled))
}

/// Check slots: a global bound on checks in flight, and an equal share of it per registry, so the
/// checks of a registry that hangs hold only that registry's share and never another's.
///
/// A due check whose registry has used its share waits here, in the order checks fell due; with
/// more registries than `limit`, each still gets one slot (the bound grows to one per registry).
pub struct Slots<T> {
    limit: usize,
    lanes: HashMap<String, Lane<T>>,
    in_flight: usize,
    arrivals: u64,
}

struct Lane<T> {
    running: usize,
    /// (arrival, item), oldest first.
    waiting: VecDeque<(u64, T)>,
}

impl<T> Slots<T> {
    pub fn new(limit: usize) -> Self {
        Slots { limit: limit.max(1), lanes: HashMap::new(), in_flight: 0, arrivals: 0 }
    }

    /// Makes a registry known; its share is counted from then on.
    pub fn register(&mut self, registry: &str) {
        if !self.lanes.contains_key(registry) {
            self.lanes.insert(registry.to_string(), Lane { running: 0, waiting: VecDeque::new() });
        }
    }

    /// Checks in flight allowed per registry.
    pub fn share(&self) -> usize {
        (self.limit / self.lanes.len().max(1)).max(1)
    }

    fn total(&self) -> usize {
        self.limit.max(self.lanes.len())
    }

    /// Whether another check may start at all.
    pub fn has_room(&self) -> bool {
        self.in_flight < self.total()
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// A due check: returned (and counted as running) when it may start now, kept when its
    /// registry has used its share or every slot is taken.
    pub fn admit(&mut self, registry: &str, item: T) -> Option<T> {
        self.register(registry);
        let (share, room) = (self.share(), self.has_room());
        let lane = self.lanes.get_mut(registry)?;
        if room && lane.running < share && lane.waiting.is_empty() {
            lane.running += 1;
            self.in_flight += 1;
            return Some(item);
        }
        lane.waiting.push_back((self.arrivals, item));
        self.arrivals += 1;
        None
    }

    /// The check that has waited longest among registries with room, now counted as running.
    pub fn next_waiting(&mut self) -> Option<T> {
        if !self.has_room() {
            return None;
        }
        let share = self.share();
        let lane = self
            .lanes
            .values_mut()
            .filter(|l| l.running < share)
            .filter_map(|l| Some((l.waiting.front()?.0, l)))
            .min_by_key(|(arrival, _)| *arrival)?
            .1;
        let (_, item) = lane.waiting.pop_front()?;
        lane.running += 1;
        self.in_flight += 1;
        Some(item)
    }

    /// A check of `registry` that was running ended.
    pub fn finished(&mut self, registry: &str) {
        if let Some(lane) = self.lanes.get_mut(registry)
            && lane.running > 0
        {
            lane.running -= 1;
            self.in_flight -= 1;
        }
    }
}

/// The daemon's wall clock. Tests anchor it to tokio's clock so a paused runtime moves it.
#[derive(Debug, Clone)]
pub enum Clock {
    System,
    Tokio {
        wall: DateTime<Utc>,
        instant: tokio::time::Instant,
    },
    /// Moves only when told to (tests that talk to real servers cannot pause tokio's clock).
    Manual(Arc<Mutex<DateTime<Utc>>>),
}

impl Clock {
    /// A clock that reads `wall` now and advances with tokio's (possibly paused) time.
    pub fn tokio_anchored(wall: DateTime<Utc>) -> Self {
        Clock::Tokio { wall, instant: tokio::time::Instant::now() }
    }

    pub fn manual(start: DateTime<Utc>) -> Self {
        Clock::Manual(Arc::new(Mutex::new(start)))
    }

    /// Moves a manual clock forward; other clocks ignore it.
    pub fn advance(&self, by: Duration) {
        if let Clock::Manual(now) = self {
            let mut now = now.lock().unwrap_or_else(|e| e.into_inner());
            *now += chrono::Duration::from_std(by).unwrap_or_default();
        }
    }

    pub fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::System => Utc::now(),
            Clock::Manual(now) => *now.lock().unwrap_or_else(|e| e.into_inner()),
            Clock::Tokio { wall, instant } => *wall + chrono::Duration::from_std(instant.elapsed()).unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use builder_monitor_core::schedule::{parse_timestamp, timestamp};
    use rand::SeedableRng;

    fn at(text: &str) -> DateTime<Utc> {
        parse_timestamp(text).unwrap()
    }

    #[test]
    fn jitter_stays_within_bounds_and_varies() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let max = Duration::from_secs(30);
        let samples: Vec<Duration> = (0..1000).map(|_| jitter(max, &mut rng)).collect();
        assert!(samples.iter().all(|d| *d <= max));
        assert!(samples.iter().any(|d| *d < Duration::from_secs(3)));
        assert!(samples.iter().any(|d| *d > Duration::from_secs(27)));
        assert_eq!(jitter(Duration::ZERO, &mut rng), Duration::ZERO);
    }

    /// Drives one watch through a timetable (checks take no time) and returns its check times.
    fn ticks(schedule: Schedule, jitter_max: Duration, start: &str, run_for: Duration) -> Vec<Duration> {
        let (origin, wall) = (Instant::now(), at(start));
        let mut table = Timetable::default();
        let id = table.add("w", (), jitter_max, origin);
        let mut times = Vec::new();
        while let Some(due) = table.next_due() {
            let elapsed = due - origin;
            if elapsed > run_for {
                break;
            }
            assert_eq!(table.pop_due(due - Duration::from_millis(1)), None, "not due early");
            assert_eq!(table.pop_due(due), Some(id));
            assert_eq!(table.next_due(), None, "a running watch is not due");
            times.push(elapsed);
            let wall = wall + chrono::Duration::from_std(elapsed).unwrap();
            if !table.finished(id, &schedule, jitter_max, due, wall) {
                break;
            }
        }
        times
    }

    #[test]
    fn interval_ticks_right_away_then_every_interval() {
        let t = ticks(
            Schedule::Interval(Duration::from_secs(300)),
            Duration::ZERO,
            "2026-11-30T12:00:00Z",
            Duration::from_secs(1000),
        );
        assert_eq!(t, [0, 300, 600, 900].map(Duration::from_secs));
    }

    #[test]
    fn jittered_ticks_stay_within_interval_plus_jitter() {
        let t = ticks(
            Schedule::Interval(Duration::from_secs(60)),
            Duration::from_secs(10),
            "2026-11-30T12:00:00Z",
            Duration::from_secs(3600),
        );
        assert!(t[0] <= Duration::from_secs(10), "{t:?}");
        for pair in t.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap >= Duration::from_secs(60) && gap <= Duration::from_secs(70), "{gap:?}");
        }
        assert!(t.len() >= 51 && t.len() <= 61, "{}", t.len());
        let gaps: BTreeSet<_> = t.windows(2).map(|p| p[1] - p[0]).collect();
        assert!(gaps.len() > 10, "jitter varies the gaps");
    }

    #[test]
    fn cron_ticks_follow_the_wall_clock() {
        let s = Schedule::cron("0 */15 * * * *").unwrap();
        let t = ticks(s, Duration::ZERO, "2026-11-30T12:07:30Z", Duration::from_secs(40 * 60));
        // At start, then 12:15:00, 12:30:00, 12:45:00.
        assert_eq!(t, [0, 450, 1350, 2250].map(Duration::from_secs));
    }

    /// Failed checks come back after 30 s, then 60, 120, … (plus up to a quarter as jitter), never
    /// later than the schedule; a success goes back to the schedule.
    #[test]
    fn failed_checks_retry_sooner_doubling_up_to_the_schedule() {
        let wall = at("2026-11-30T12:00:00Z");
        let schedule = Schedule::Interval(Duration::from_secs(200));
        let mut table = Timetable::default();
        let t0 = Instant::now();
        let id = table.add("w", (), Duration::ZERO, t0);
        let mut now = t0;
        let mut gaps = Vec::new();
        for round in 0..6 {
            let due = table.next_due().unwrap();
            let ran = table.pop_due(due).unwrap();
            assert_eq!(ran, id);
            if round < 4 {
                let delay = after_failure(round + 1, &schedule, Duration::ZERO, wall);
                assert!(table.failed(id, delay, now));
            } else {
                assert!(table.finished(id, &schedule, Duration::ZERO, now, wall));
            }
            let due = table.next_due().unwrap();
            gaps.push((due - now).as_secs());
            now = due;
        }
        let within = |gap: u64, base: u64| gap >= base && gap <= base + base / 4;
        assert!(within(gaps[0], 30) && within(gaps[1], 60) && within(gaps[2], 120), "{gaps:?}");
        assert_eq!(&gaps[3..], [200, 200, 200], "capped by the schedule, then the schedule again: {gaps:?}");
    }

    #[test]
    fn a_schedule_without_future_firings_stops_but_wakes_still_check() {
        let s = Schedule::cron("0 0 0 1 1 * 2027").unwrap();
        let t = ticks(s.clone(), Duration::ZERO, "2027-06-01T00:00:00Z", Duration::from_secs(3600));
        assert_eq!(t, [Duration::ZERO]);
        let now = Instant::now();
        let mut table = Timetable::default();
        let id = table.add("w", (), Duration::ZERO, now);
        assert_eq!(table.pop_due(now), Some(id));
        assert!(!table.finished(id, &s, Duration::ZERO, now, at("2027-06-01T00:00:00Z")));
        assert_eq!(table.next_due(), None);
        table.wake(id, now);
        assert_eq!(table.pop_due(now), Some(id));
    }

    #[test]
    fn wakes_check_at_once_or_right_after_the_running_check() {
        let hour = Schedule::Interval(Duration::from_secs(3600));
        let t0 = Instant::now();
        let wall = at("2026-11-30T12:00:00Z");
        let mut table = Timetable::default();
        let a = table.add("a", "a", Duration::ZERO, t0);
        let b = table.add("b", "b", Duration::ZERO, t0);
        assert_eq!(table.add("a", "again", Duration::ZERO, t0), a, "one entry per name");
        assert_eq!((table.pop_due(t0), table.pop_due(t0), table.pop_due(t0)), (Some(a), Some(b), None));
        assert!(table.finished(a, &hour, Duration::ZERO, t0, wall));
        // Waiting: a wake makes it due now, and the old due time no longer counts.
        let t1 = t0 + Duration::from_secs(5);
        table.wake(a, t1);
        assert_eq!(table.next_due(), Some(t1));
        assert_eq!(table.pop_due(t1), Some(a));
        assert_eq!(table.pop_due(t0 + Duration::from_secs(7200)), None, "the stale hourly entry is gone");
        // Running: twice woken, checked once more right after, then back on its schedule.
        table.wake(b, t1);
        table.wake(b, t1);
        assert!(table.finished(b, &hour, Duration::ZERO, t1, wall));
        assert_eq!(table.pop_due(t1), Some(b));
        assert_eq!(table.pop_due(t1), None);
        assert!(table.finished(b, &hour, Duration::ZERO, t1, wall));
        assert_eq!(table.next_due(), Some(t1 + Duration::from_secs(3600)));
        // Removed: never due again, wakes ignored, and the name can be added afresh.
        table.remove(b);
        table.wake(b, t1);
        assert_eq!(table.id("b"), None);
        assert!(table.finished(a, &hour, Duration::ZERO, t1, wall));
        assert_eq!(table.next_due(), Some(t1 + Duration::from_secs(3600)));
        let b2 = table.add("b", "b2", Duration::ZERO, t1);
        assert_ne!(b2, b);
        assert_eq!((table.id("b"), *table.item(b2)), (Some(b2), "b2"));
        assert_eq!((table.id("a"), *table.item(a)), (Some(a), "a"));
        assert_eq!(table.pop_due(t1), Some(b2));
    }

    #[test]
    fn many_watches_come_due_in_time_order() {
        let t0 = Instant::now();
        let mut table = Timetable::default();
        for i in 0..1000 {
            table.add(&format!("w{i}"), i, Duration::from_secs(60), t0);
        }
        let mut last = t0;
        let mut seen = BTreeSet::new();
        while let Some(due) = table.next_due() {
            assert!(due >= last && due <= t0 + Duration::from_secs(60));
            last = due;
            seen.insert(table.pop_due(due).unwrap());
        }
        assert_eq!(seen.len(), 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_anchored_clock_follows_paused_time() {
        let clock = Clock::tokio_anchored(at("2026-11-30T12:00:00Z"));
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(timestamp(clock.now()), "2026-11-30T12:01:30Z");
    }

    #[test]
    fn slots_give_each_registry_its_share_and_keep_due_order() {
        let mut slots = Slots::new(4);
        slots.register("slow");
        slots.register("fast");
        assert_eq!(slots.share(), 2);
        // The slow registry's checks fall due first; only its share starts.
        let started: Vec<_> = (0..5).filter_map(|i| slots.admit("slow", format!("slow{i}"))).collect();
        assert_eq!(started, ["slow0", "slow1"]);
        assert_eq!(slots.next_waiting(), None, "slow is at its share");
        // The fast registry still has its own share.
        assert_eq!(slots.admit("fast", "fast0".into()), Some("fast0".into()));
        assert_eq!(slots.admit("fast", "fast1".into()), Some("fast1".into()));
        assert!(!slots.has_room());
        assert_eq!(slots.admit("fast", "fast2".into()), None);
        slots.finished("fast");
        // Fast has room again; slow's waiting checks do not take it.
        assert_eq!(slots.next_waiting(), Some("fast2".into()));
        slots.finished("slow");
        assert_eq!(slots.next_waiting(), Some("slow2".into()));
        assert_eq!(slots.next_waiting(), None);
        assert_eq!(slots.in_flight(), 4);
    }

    #[test]
    fn slots_with_one_registry_use_them_all_and_more_registries_than_slots_get_one_each() {
        let mut slots = Slots::new(3);
        slots.register("only");
        assert_eq!((0..5).filter_map(|i| slots.admit("only", i)).count(), 3);
        let mut many = Slots::new(2);
        for r in ["a", "b", "c"] {
            many.register(r);
        }
        assert_eq!(many.share(), 1);
        for r in ["a", "b", "c"] {
            assert_eq!(many.admit(r, r), Some(r), "every registry gets a slot");
        }
        assert!(!many.has_room());
    }
}

//! When checks happen: a fixed interval or a cron expression (seconds first) plus random jitter,
//! and the settle rule that holds a new digest back until it has stayed put long enough.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
pub enum Schedule {
    Interval(Duration),
    Cron { expression: String, schedule: Box<cron::Schedule> },
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string())
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Interval(d) => write!(f, "every {}", humantime::format_duration(*d)),
            Schedule::Cron { expression, .. } => write!(f, "cron \"{expression}\""),
        }
    }
}

impl Schedule {
    /// Parses a cron expression; the message explains the seconds-first syntax when that is the problem.
    pub fn cron(expression: &str) -> Result<Self, String> {
        let fields = expression.split_whitespace().count();
        if fields == 5 && !expression.trim_start().starts_with('@') {
            return Err(format!(
                "cron expression \"{expression}\" has 5 fields; builder-monitor's cron has seconds first (6 or 7 fields), e.g. \"0 {expression}\""
            ));
        }
        match cron::Schedule::from_str(expression) {
            Ok(schedule) => {
                if schedule.upcoming(Utc).next().is_none() {
                    return Err(format!("cron expression \"{expression}\" never fires again"));
                }
                Ok(Schedule::Cron { expression: expression.to_string(), schedule: Box::new(schedule) })
            }
            Err(err) => Err(format!(
                "invalid cron expression \"{expression}\" (sec min hour day-of-month month day-of-week [year]; day-of-week 1 = Sunday, names like Mon-Fri are safer): {err}"
            )),
        }
    }

    /// Time from `now` until the next check is due, before jitter. `None` when a cron schedule has
    /// no future firing left.
    pub fn delay_after(&self, now: DateTime<Utc>) -> Option<Duration> {
        match self {
            Schedule::Interval(d) => Some(*d),
            Schedule::Cron { schedule, .. } => {
                let next = schedule.after(&now).next()?;
                Some((next - now).to_std().unwrap_or_default())
            }
        }
    }
}

/// A random delay in `[0, max]`, spreading checks so they do not hit a registry together.
pub fn jitter(max: Duration, rng: &mut impl Rng) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    Duration::from_nanos(rng.random_range(0..=max.as_nanos().min(u64::MAX as u128) as u64))
}

/// Calls `tick` on `schedule` until `shutdown`: first right away (after jitter), then after each
/// scheduled delay plus jitter, or earlier when `wake` is notified (a push hook, the API).
pub async fn run_schedule<F, Fut>(
    schedule: &Schedule,
    jitter_max: Duration,
    clock: &Clock,
    shutdown: &CancellationToken,
    wake: &Notify,
    mut tick: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut delay = jitter(jitter_max, &mut rand::rng());
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = wake.notified() => {}
            _ = tokio::time::sleep(delay) => {}
        }
        tick().await;
        if shutdown.is_cancelled() {
            return;
        }
        let Some(base) = schedule.delay_after(clock.now()) else {
            tracing::warn!(schedule = %schedule, "schedule has no future firing; no more checks");
            shutdown.cancelled().await;
            return;
        };
        delay = base + jitter(jitter_max, &mut rand::rng());
    }
}

/// What to do with a digest that differs from the pin, under the settle rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Report the move now.
    Report,
    /// Hold it back; it has been seen continuously since this time.
    Hold { since: DateTime<Utc> },
}

/// `pending` is the digest held back so far and when it was first seen.
pub fn settle(
    settle: Option<Duration>,
    pending: Option<(&str, DateTime<Utc>)>,
    observed: &str,
    now: DateTime<Utc>,
) -> Settle {
    let Some(settle) = settle else {
        return Settle::Report;
    };
    match pending {
        Some((digest, since)) if digest == observed => {
            let held = (now - since).to_std().unwrap_or_default();
            if held >= settle { Settle::Report } else { Settle::Hold { since } }
        }
        _ => Settle::Hold { since: now },
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

/// RFC 3339 in UTC with second precision, the one timestamp format of the ledger and events.
pub fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// RFC 3339 with milliseconds: for times that order work (`next_attempt`), compared as text, so
/// every such column uses this one format.
pub fn timestamp_millis(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub fn parse_timestamp(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text).ok().map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn at(text: &str) -> DateTime<Utc> {
        parse_timestamp(text).unwrap()
    }

    #[test]
    fn interval_is_constant() {
        let s = Schedule::Interval(Duration::from_secs(300));
        assert_eq!(s.delay_after(at("2026-11-30T12:07:30Z")), Some(Duration::from_secs(300)));
        assert_eq!(s.to_string(), "every 5m");
    }

    #[test]
    fn cron_waits_for_the_next_firing() {
        let s = Schedule::cron("0 */15 * * * *").unwrap();
        assert_eq!(s.delay_after(at("2026-11-30T12:07:30Z")), Some(Duration::from_secs(7 * 60 + 30)));
        // Exactly on a firing: the next one, never zero.
        assert_eq!(s.delay_after(at("2026-11-30T12:15:00Z")), Some(Duration::from_secs(15 * 60)));
        let daily = Schedule::cron("0 0 3 * * Mon-Fri").unwrap();
        // 2026-11-28 is a Saturday: next is Monday 03:00.
        assert_eq!(daily.delay_after(at("2026-11-28T04:00:00Z")), Some(Duration::from_secs(47 * 3600)));
    }

    #[test]
    fn cron_errors_explain_the_syntax() {
        let e = Schedule::cron("*/5 * * * *").unwrap_err();
        assert!(e.contains("seconds first") && e.contains("\"0 */5 * * * *\""), "{e}");
        let e = Schedule::cron("0 0 25 * * *").unwrap_err();
        assert!(e.starts_with("invalid cron expression"), "{e}");
        let e = Schedule::cron("0 0 0 1 1 * 2020").unwrap_err();
        assert!(e.contains("never fires"), "{e}");
        assert!(Schedule::cron("@hourly").is_ok());
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

    #[test]
    fn settle_holds_a_new_digest_until_it_has_stayed_long_enough() {
        let window = Some(Duration::from_secs(1800));
        let t0 = at("2026-11-30T12:00:00Z");
        assert_eq!(settle(None, None, "sha256:b", t0), Settle::Report);
        assert_eq!(settle(window, None, "sha256:b", t0), Settle::Hold { since: t0 });
        let t1 = at("2026-11-30T12:29:59Z");
        assert_eq!(settle(window, Some(("sha256:b", t0)), "sha256:b", t1), Settle::Hold { since: t0 });
        let t2 = at("2026-11-30T12:30:00Z");
        assert_eq!(settle(window, Some(("sha256:b", t0)), "sha256:b", t2), Settle::Report);
        // The tag moved again while held: the clock restarts for the new digest.
        assert_eq!(settle(window, Some(("sha256:b", t0)), "sha256:c", t2), Settle::Hold { since: t2 });
    }

    /// Runs a schedule on a paused clock and returns the virtual times of its ticks.
    async fn ticks(schedule: Schedule, jitter_max: Duration, start: &str, run_for: Duration) -> Vec<Duration> {
        let clock = Clock::tokio_anchored(at(start));
        let shutdown = CancellationToken::new();
        let wake = Notify::new();
        let origin = tokio::time::Instant::now();
        let times = std::cell::RefCell::new(Vec::new());
        let stopper = shutdown.clone();
        tokio::join!(
            run_schedule(&schedule, jitter_max, &clock, &shutdown, &wake, || {
                times.borrow_mut().push(origin.elapsed());
                std::future::ready(())
            }),
            async move {
                tokio::time::sleep(run_for).await;
                stopper.cancel();
            }
        );
        times.into_inner()
    }

    #[tokio::test(start_paused = true)]
    async fn interval_ticks_right_away_then_every_interval() {
        let t = ticks(
            Schedule::Interval(Duration::from_secs(300)),
            Duration::ZERO,
            "2026-11-30T12:00:00Z",
            Duration::from_secs(1000),
        )
        .await;
        assert_eq!(t, [0, 300, 600, 900].map(Duration::from_secs));
    }

    #[tokio::test(start_paused = true)]
    async fn jittered_ticks_stay_within_interval_plus_jitter() {
        let t = ticks(
            Schedule::Interval(Duration::from_secs(60)),
            Duration::from_secs(10),
            "2026-11-30T12:00:00Z",
            Duration::from_secs(3600),
        )
        .await;
        assert!(t[0] <= Duration::from_secs(10), "{t:?}");
        for pair in t.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap >= Duration::from_secs(60) && gap <= Duration::from_secs(70), "{gap:?}");
        }
        assert!(t.len() >= 51 && t.len() <= 61, "{}", t.len());
    }

    #[tokio::test(start_paused = true)]
    async fn cron_ticks_follow_the_wall_clock() {
        let s = Schedule::cron("0 */15 * * * *").unwrap();
        let t = ticks(s, Duration::ZERO, "2026-11-30T12:07:30Z", Duration::from_secs(40 * 60)).await;
        // At start, then 12:15:00, 12:30:00, 12:45:00.
        assert_eq!(t, [0, 450, 1350, 2250].map(Duration::from_secs));
    }

    #[tokio::test(start_paused = true)]
    async fn wake_checks_early_and_shutdown_stops_promptly() {
        let clock = Clock::tokio_anchored(at("2026-11-30T12:00:00Z"));
        let shutdown = CancellationToken::new();
        let wake = std::sync::Arc::new(Notify::new());
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let task = {
            let (shutdown, wake, count, clock) = (shutdown.clone(), wake.clone(), count.clone(), clock.clone());
            tokio::spawn(async move {
                let s = Schedule::Interval(Duration::from_secs(3600));
                run_schedule(&s, Duration::ZERO, &clock, &shutdown, &wake, || {
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    std::future::ready(())
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1);
        wake.notify_one();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 2);
        shutdown.cancel();
        task.await.unwrap();
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_anchored_clock_follows_paused_time() {
        let clock = Clock::tokio_anchored(at("2026-11-30T12:00:00Z"));
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(timestamp(clock.now()), "2026-11-30T12:01:30Z");
    }
}

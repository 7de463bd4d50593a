//! The pace of an action's requests to one registry: as fast as the action's concurrency allows
//! until the registry says otherwise, then additive-increase/multiplicative-decrease of a rate in
//! requests per second, never above what its `RateLimit-*` headers allow.
//!
//! The watching has its own fixed budget (`requests_per_second`); an action writes to the team's
//! own registry, and only that registry's answers (429 or 503, `Retry-After`, `RateLimit-*`) say
//! how fast it may go. Pure: every decision takes the moment it is made for.

use std::time::{Duration, Instant};

/// The slowest pace a throttled registry brings actions down to (one request every 2 s).
pub const MIN_RATE: f64 = 0.5;
/// What a throttling answer multiplies the rate by.
pub const DECREASE: f64 = 0.5;
/// Requests per second the rate grows by for each second of answers that did not throttle.
pub const INCREASE: f64 = 1.0;
/// Above this rate, with no allowance from the registry in force, there is no pace at all again.
pub const UNBOUNDED_ABOVE: f64 = 1000.0;
/// Longest hold a spent allowance imposes: a registry's word, bounded like `Retry-After`.
pub const MAX_HOLD: Duration = Duration::from_secs(600);

/// What one answer of the registry said about the pace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer {
    /// An answer that did not throttle.
    Passed,
    /// 429, or 503 with `Retry-After`: slow down (the pause itself is the caller's to keep).
    Throttled,
    /// `RateLimit-*` headers: `remaining` requests allowed until `reset` from now.
    Allowance { remaining: u64, reset: Duration },
}

/// One registry's action pace.
#[derive(Debug, Clone, Default)]
pub struct Pace {
    /// Requests per second now; `None`: no pace (no throttling seen, or recovered from it).
    rate: Option<f64>,
    /// The registry's allowance in requests per second, in force until the instant.
    ceiling: Option<(f64, Instant)>,
    /// No request before this (the allowance is spent until its reset).
    hold_until: Option<Instant>,
    /// When the last request went.
    last: Option<Instant>,
    /// When a throttle last brought the rate down: the throttles of one round of requests
    /// (answered together) bring it down once.
    decreased: Option<Instant>,
    /// Requests sent in the current second and the one before, for the rate a throttle found.
    window: Option<(Instant, u32, u32)>,
}

impl Pace {
    /// The requests per second allowed now; `None` when unpaced.
    pub fn rate(&self, now: Instant) -> Option<f64> {
        let ceiling = self.ceiling.filter(|(_, until)| *until > now).map(|(c, _)| c);
        match (self.rate, ceiling) {
            (Some(r), Some(c)) => Some(r.min(c)),
            (r, c) => r.or(c),
        }
    }

    /// Whether a request may go at `now`: `None`, it goes (and is counted); `Some(wait)`, ask
    /// again after `wait` (the rate may have changed by then, and another request may go first).
    pub fn turn(&mut self, now: Instant) -> Option<Duration> {
        if let Some(hold) = self.hold_until.filter(|h| *h > now) {
            return Some(hold - now);
        }
        if let Some(rate) = self.rate(now)
            && let Some(last) = self.last
        {
            let next = last + Duration::from_secs_f64(1.0 / rate);
            if next > now {
                return Some(next - now);
            }
        }
        self.last = Some(now);
        self.count(now);
        None
    }

    /// Learns from an answer received at `now`.
    pub fn answered(&mut self, now: Instant, answer: Answer) {
        match answer {
            Answer::Passed => {
                if let Some(rate) = self.rate {
                    // One rate's worth of answers a second: about INCREASE more per second.
                    let grown = rate + INCREASE / rate.max(1.0);
                    self.rate = (grown <= UNBOUNDED_ABOVE).then_some(grown);
                }
            }
            Answer::Throttled => {
                if self.decreased.is_some_and(|d| now.saturating_duration_since(d) < Duration::from_secs(1)) {
                    return;
                }
                self.decreased = Some(now);
                let from = self.rate.unwrap_or_else(|| self.observed(now));
                self.rate = Some((from * DECREASE).max(MIN_RATE));
            }
            Answer::Allowance { remaining, reset } => {
                let reset = reset.min(MAX_HOLD);
                if remaining == 0 {
                    if !reset.is_zero() {
                        let until = now + reset;
                        self.hold_until = Some(self.hold_until.map_or(until, |h| h.max(until)));
                    }
                    return;
                }
                if reset.is_zero() {
                    return;
                }
                let allowed = (remaining as f64 / reset.as_secs_f64()).max(MIN_RATE);
                self.ceiling = Some((allowed, now + reset));
            }
        }
    }

    /// Requests per second sent lately: the busier of the current and the last whole second.
    fn observed(&self, now: Instant) -> f64 {
        match self.window {
            Some((start, current, last)) if now.duration_since(start) < Duration::from_secs(2) => {
                f64::from(current.max(last)).max(MIN_RATE)
            }
            _ => MIN_RATE.max(1.0),
        }
    }

    fn count(&mut self, at: Instant) {
        self.window = Some(match self.window {
            Some((start, current, last)) => match at.saturating_duration_since(start).as_secs() {
                0 => (start, current + 1, last),
                1 => (start + Duration::from_secs(1), 1, current),
                _ => (at, 1, 0),
            },
            None => (at, 1, 0),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn unpaced_until_the_registry_throttles() {
        let t = Instant::now();
        let mut pace = Pace::default();
        for i in 0..1000 {
            assert_eq!(pace.turn(t + ms(i / 10)), None, "request {i}");
            pace.answered(t + ms(i / 10), Answer::Passed);
        }
        assert_eq!(pace.rate(t), None);
    }

    #[test]
    fn a_throttle_halves_the_rate_it_found_once_per_round() {
        let t = Instant::now();
        let mut pace = Pace::default();
        for _ in 0..40 {
            assert_eq!(pace.turn(t), None);
        }
        pace.answered(t + ms(10), Answer::Throttled);
        assert_eq!(pace.rate(t), Some(20.0), "40 sent in that second, halved");
        pace.answered(t + ms(20), Answer::Throttled);
        assert_eq!(pace.rate(t), Some(20.0), "the same round's throttles count once");
        pace.answered(t + ms(1020), Answer::Throttled);
        assert_eq!(pace.rate(t), Some(10.0), "a later round's halve it again");
        for i in 0..20 {
            pace.answered(t + secs(2 + i), Answer::Throttled);
        }
        assert_eq!(pace.rate(t), Some(MIN_RATE), "never below the floor");
    }

    #[test]
    fn paced_requests_are_spaced_by_the_rate() {
        let t = Instant::now();
        let mut pace = Pace::default();
        pace.answered(t, Answer::Throttled);
        assert_eq!(pace.rate(t), Some(MIN_RATE), "throttled with nothing sent: the floor");
        assert_eq!(pace.turn(t), None);
        assert_eq!(pace.turn(t), Some(secs(2)));
        assert_eq!(pace.turn(t + secs(1)), Some(secs(1)), "asked again, it waits the rest");
        assert_eq!(pace.turn(t + secs(2)), None);
        // An answer that passed speeds the next turn up at once.
        pace.answered(t + secs(2), Answer::Passed);
        assert_eq!(pace.rate(t), Some(1.5));
        assert!(pace.turn(t + secs(3)).is_none());
    }

    #[test]
    fn answers_that_pass_grow_the_rate_by_about_one_a_second_until_unpaced() {
        let t = Instant::now();
        let mut pace = Pace::default();
        for _ in 0..20 {
            pace.turn(t);
        }
        pace.answered(t, Answer::Throttled);
        assert_eq!(pace.rate(t), Some(10.0));
        for _ in 0..10 {
            pace.answered(t, Answer::Passed);
        }
        let grown = pace.rate(t).unwrap();
        assert!((10.9..=11.0).contains(&grown), "{grown}: one second's answers, about one more a second");
        let mut n = 0;
        while pace.rate(t).is_some() {
            pace.answered(t, Answer::Passed);
            n += 1;
            assert!(n < 1_000_000, "recovers");
        }
    }

    #[test]
    fn never_faster_than_the_allowance() {
        let t = Instant::now();
        let mut pace = Pace::default();
        pace.answered(t, Answer::Allowance { remaining: 10, reset: secs(5) });
        assert_eq!(pace.rate(t), Some(2.0));
        assert_eq!(pace.turn(t), None);
        assert_eq!(pace.turn(t), Some(ms(500)));
        for _ in 0..100 {
            pace.answered(t, Answer::Passed);
        }
        assert_eq!(pace.rate(t), Some(2.0), "passing answers grow nothing beyond the allowance");
        // Once the allowance's window is over, it holds no more.
        assert_eq!(pace.rate(t + secs(5)), None);
    }

    #[test]
    fn a_spent_allowance_holds_every_request_until_its_reset() {
        let t = Instant::now();
        let mut pace = Pace::default();
        pace.answered(t, Answer::Allowance { remaining: 0, reset: secs(3) });
        assert_eq!(pace.turn(t), Some(secs(3)));
        assert_eq!(pace.turn(t + secs(1)), Some(secs(2)));
        assert_eq!(pace.turn(t + secs(3)), None);
        pace.answered(t, Answer::Allowance { remaining: 0, reset: secs(86_400) });
        assert_eq!(pace.turn(t), Some(MAX_HOLD), "bounded");
        pace.answered(t, Answer::Allowance { remaining: 0, reset: Duration::ZERO });
        assert_eq!(pace.turn(t + MAX_HOLD), None, "a reset of zero holds nothing");
    }
}

//! Schedules and timestamps: a fixed interval or a cron expression (seconds first), the settle
//! rule that holds a new digest back until it has stayed put, and the ledger's one time format.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};

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

/// Why a cron expression is refused; each message explains the seconds-first syntax where that is
/// the likely problem.
#[derive(Debug, thiserror::Error)]
pub enum CronError {
    #[error(
        "cron expression \"{expression}\" has 5 fields; builder-monitor's cron has seconds first (6 or 7 fields), e.g. \"0 {expression}\""
    )]
    FiveFields { expression: String },
    #[error("cron expression \"{expression}\" never fires again")]
    NeverFires { expression: String },
    #[error(
        "invalid cron expression \"{expression}\" (sec min hour day-of-month month day-of-week [year]; day-of-week 1 = Sunday, names like Mon-Fri are safer): {reason}"
    )]
    Invalid { expression: String, reason: String },
}

impl Schedule {
    /// Parses a cron expression.
    pub fn cron(expression: &str) -> Result<Self, CronError> {
        let fields = expression.split_whitespace().count();
        if fields == 5 && !expression.trim_start().starts_with('@') {
            return Err(CronError::FiveFields { expression: expression.to_string() });
        }
        match cron::Schedule::from_str(expression) {
            Ok(schedule) => {
                if schedule.upcoming(Utc).next().is_none() {
                    return Err(CronError::NeverFires { expression: expression.to_string() });
                }
                Ok(Schedule::Cron { expression: expression.to_string(), schedule: Box::new(schedule) })
            }
            // The parser's own words run over several lines (its input echoed, a caret under
            // it, then the reason): the reason alone, on one line, as every config error is.
            Err(source) => {
                let text = source.to_string();
                let words: Vec<&str> = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.trim_matches('^').is_empty() && *l != expression.trim())
                    .collect();
                let reason = words.join("; ").split_whitespace().collect::<Vec<_>>().join(" ");
                Err(CronError::Invalid {
                    expression: expression.to_string(),
                    reason: crate::text::clip(&reason, 200).into_owned(),
                })
            }
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

impl Schedule {
    /// The next `count` firings of a cron schedule after `after`; none for an interval (which
    /// counts from each check's end, not from the clock).
    pub fn next_firings(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        match self {
            Schedule::Interval(_) => Vec::new(),
            Schedule::Cron { schedule, .. } => schedule.after(&after).take(count).collect(),
        }
    }
}

/// A firing for people, with its weekday so a day-of-week field is read as meant:
/// `Mon 2026-12-07 09:00 UTC` (seconds only when not zero).
pub fn firing_text(t: DateTime<Utc>) -> String {
    let format = if t.timestamp() % 60 == 0 { "%a %Y-%m-%d %H:%M UTC" } else { "%a %Y-%m-%d %H:%M:%S UTC" };
    t.format(format).to_string()
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

/// When the check after one at `now` is due (before jitter), RFC 3339; `None` when the schedule
/// has no future firing.
pub fn next_check(schedule: &Schedule, now: DateTime<Utc>) -> Option<String> {
    let delay = schedule.delay_after(now)?;
    Some(timestamp(now + chrono::Duration::from_std(delay).ok()?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn cron_firings_are_listed_with_weekday_names() {
        let after = super::parse_timestamp("2026-12-01T00:00:00Z").unwrap();
        let text = |expression: &str| -> Vec<String> {
            let schedule = super::Schedule::cron(expression).unwrap();
            schedule.next_firings(after, 3).into_iter().map(super::firing_text).collect()
        };
        assert_eq!(
            text("0 0 9 * * Mon"),
            ["Mon 2026-12-07 09:00 UTC", "Mon 2026-12-14 09:00 UTC", "Mon 2026-12-21 09:00 UTC"]
        );
        // The cron crate counts days of the week from Sunday = 1.
        assert_eq!(
            text("0 0 9 * * 1"),
            ["Sun 2026-12-06 09:00 UTC", "Sun 2026-12-13 09:00 UTC", "Sun 2026-12-20 09:00 UTC"]
        );
        assert_eq!(
            text("30 */20 * * * *"),
            ["Tue 2026-12-01 00:00:30 UTC", "Tue 2026-12-01 00:20:30 UTC", "Tue 2026-12-01 00:40:30 UTC"]
        );
        assert!(super::Schedule::Interval(std::time::Duration::from_secs(60)).next_firings(after, 3).is_empty());
    }

    use super::*;

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
        let e = Schedule::cron("*/5 * * * *").unwrap_err().to_string();
        assert!(e.contains("seconds first") && e.contains("\"0 */5 * * * *\""), "{e}");
        let e = Schedule::cron("0 0 25 * * *").unwrap_err().to_string();
        assert!(e.starts_with("invalid cron expression"), "{e}");
        for bad in ["0 0 25 * * *", "0 0 * * * Mun", "x y z a b c", "0 0 0 31 2 * 2020-"] {
            let e = Schedule::cron(bad).unwrap_err().to_string();
            assert!(!e.contains('\n') && !e.contains("  ") && !e.contains('^'), "one line: {e:?}");
        }
        let e = Schedule::cron("0 0 0 1 1 * 2020").unwrap_err().to_string();
        assert!(e.contains("never fires"), "{e}");
        assert!(Schedule::cron("@hourly").is_ok());
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
}

//! How often one registry is asked: its rate limiter, the pauses a 429 or a spent pull quota
//! impose, and the backoff between retries.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use rand::Rng;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use tokio::time::Instant;

use super::Endpoint;
use crate::config::RegistrySettings;
use crate::registry::{MAX_BACKOFF, MAX_INLINE_WAIT, RegistryError, RequestClass, whole_seconds};
use builder_monitor_core::pace::Answer;

/// Pull quota a registry reported in `RateLimit-*` headers (Docker Hub: `76;w=21600`).
#[derive(Debug, Clone, Copy)]
pub(in crate::registry) struct PullQuota {
    pub(in crate::registry) remaining: u64,
    pub(in crate::registry) limit: Option<u64>,
    pub(in crate::registry) window: Option<Duration>,
    /// When the allowance comes back (`RateLimit-Reset`, or `reset`/`t` of `RateLimit`).
    pub(in crate::registry) reset: Option<Duration>,
}

impl Endpoint {
    /// Waits out any pause and the pace of `class` (the watching's limiter; an action's fixed
    /// limiter or AIMD pace); fails fast when a pause is too long to wait inline.
    pub(in crate::registry) async fn wait_turn(&self, pull: bool, class: RequestClass) -> Result<(), RegistryError> {
        let mut waited = Duration::ZERO;
        loop {
            self.wait_pause(pull, &mut waited).await?;
            match class {
                RequestClass::Watch => {
                    if let Some(limiter) = &self.limiter {
                        let started = Instant::now();
                        limiter.until_ready().await;
                        waited += started.elapsed();
                    }
                    if !waited.is_zero() {
                        self.metrics.rate_limit_wait.get_or_create(&self.labels).inc_by(waited.as_secs_f64());
                    }
                    return Ok(());
                }
                RequestClass::Action => {
                    let wait = match &self.action_limiter {
                        Some(limiter) => {
                            let started = Instant::now();
                            limiter.until_ready().await;
                            waited += started.elapsed();
                            None
                        }
                        None => {
                            self.action_pace.lock().unwrap_or_else(|e| e.into_inner()).turn(Instant::now().into_std())
                        }
                    };
                    let Some(wait) = wait else {
                        if !waited.is_zero() {
                            self.metrics.action_pace_wait.get_or_create(&self.labels).inc_by(waited.as_secs_f64());
                        }
                        return Ok(());
                    };
                    if wait > MAX_INLINE_WAIT {
                        return Err(self.rate_limited(format!(
                            "the registry's pace holds actions' requests back for another {}",
                            whole_seconds(wait)
                        )));
                    }
                    // Then the pause again: a 429 may have come meanwhile.
                    tokio::time::sleep(wait).await;
                    waited += wait;
                }
            }
        }
    }

    /// Waits out a pause (a 429's, a spent pull quota's); fails fast when it is too long.
    async fn wait_pause(&self, pull: bool, waited: &mut Duration) -> Result<(), RegistryError> {
        loop {
            let now = Instant::now();
            let paused = *self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
            let pulls = if pull { *self.pulls_paused_until.lock().unwrap_or_else(|e| e.into_inner()) } else { None };
            match paused.max(pulls) {
                Some(until) if until > now => {
                    let wait = until - now;
                    if wait > MAX_INLINE_WAIT {
                        let why = if pulls > paused { "the pull quota is spent" } else { "after an HTTP 429" };
                        return Err(self.rate_limited(format!(
                            "requests to this registry are paused for another {} ({why})",
                            whole_seconds(wait)
                        )));
                    }
                    tokio::time::sleep_until(until).await;
                    *waited += wait;
                }
                _ => return Ok(()),
            }
        }
    }

    /// What an answer to an action's request tells its pace: a throttle (429, or 503 with
    /// `Retry-After`), the registry's allowance (`RateLimit-*`), or that it passed.
    pub(in crate::registry) fn pace_answer(&self, status: reqwest::StatusCode, headers: &HeaderMap) {
        let now = Instant::now().into_std();
        let mut pace = self.action_pace.lock().unwrap_or_else(|e| e.into_inner());
        if throttles(status, headers) {
            pace.answered(now, Answer::Throttled);
        } else {
            pace.answered(now, Answer::Passed);
        }
        if let Some(quota) = parse_quota(headers)
            && let Some(reset) = quota.reset.or(quota.window)
        {
            pace.answered(now, Answer::Allowance { remaining: quota.remaining, reset });
        }
        let rate = pace.rate(now).unwrap_or(0.0);
        drop(pace);
        self.metrics.action_rate.get_or_create(&self.labels).set(rate);
    }

    /// The action pace's requests per second now; `None` when unpaced or held by a fixed limiter.
    pub(in crate::registry) fn action_rate(&self) -> Option<f64> {
        let pace = self.action_pace.lock().unwrap_or_else(|e| e.into_inner());
        pace.rate(Instant::now().into_std())
    }

    pub(in crate::registry) fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.settings.backoff.saturating_mul(1u32 << attempt.min(16)).min(MAX_BACKOFF);
        // Half fixed, half random: retries from many tasks spread out but never come back at once.
        let half = exp / 2;
        half + rand::rng().random_range(Duration::ZERO..=half)
    }

    /// Holds every request back for `wait`, at most `max_retry_after`.
    pub(in crate::registry) fn pause(&self, wait: Duration) {
        let until = Instant::now() + wait.min(self.settings.max_retry_after);
        let mut paused = self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        if paused.is_none_or(|p| p < until) {
            *paused = Some(until);
        }
    }

    /// Reads `RateLimit-Remaining`/`RateLimit-Limit`; when the pull quota is spent, holds GETs back for
    /// the time one pull takes to come back (window / limit), rather than earning a 429.
    pub(in crate::registry) fn observe_quota(&self, headers: &HeaderMap) {
        let Some(quota) = parse_quota(headers) else {
            return;
        };
        if quota.remaining > 0 {
            if let Some(limit) = quota.limit
                && quota.remaining * 10 < limit
            {
                tracing::warn!(registry = %self.settings.host, remaining = quota.remaining, limit, "registry pull quota nearly spent");
            }
            return;
        }
        if let Some(reset) = quota.reset.filter(|_| quota.window.is_none()) {
            // The IETF draft's allowance, spent: no GET before its reset (an action's requests
            // are held by their pace too).
            let wait = reset.min(self.settings.max_retry_after);
            *self.pulls_paused_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + wait);
            return;
        }
        let window = quota.window.unwrap_or(Duration::from_secs(3600));
        let limit = u32::try_from(quota.limit.unwrap_or(1).max(1)).unwrap_or(u32::MAX);
        // A registry's word, so bounded like Retry-After.
        let wait = (window / limit).min(self.settings.max_retry_after);
        tracing::warn!(registry = %self.settings.host, wait = %whole_seconds(wait), "registry pull quota spent, holding GETs back");
        *self.pulls_paused_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + wait);
    }
}

/// A registry's request limiter (`None`: no limit). The rate goes through `config::rate_period`, so
/// no configured rate can overflow the period (a rate of 1e-30 once panicked every check).
pub fn rate_limiter(settings: &RegistrySettings) -> Option<DefaultDirectRateLimiter> {
    let rps = settings.requests_per_second?;
    let burst = NonZeroU32::new(settings.burst).unwrap_or(NonZeroU32::MIN);
    let quota =
        Quota::with_period(crate::config::rate_period(rps)).unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX));
    Some(RateLimiter::direct(quota.allow_burst(burst)))
}

/// Actions' fixed limiter (`write_requests_per_second`); `None`: paced by the registry's answers.
pub fn write_rate_limiter(settings: &RegistrySettings) -> Option<DefaultDirectRateLimiter> {
    let rps = settings.write_requests_per_second?;
    let burst = NonZeroU32::new(settings.burst).unwrap_or(NonZeroU32::MIN);
    let quota =
        Quota::with_period(crate::config::rate_period(rps)).unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX));
    Some(RateLimiter::direct(quota.allow_burst(burst)))
}

/// Whether an answer asks to slow down: a 429, or a 503 that says when to come back.
pub(in crate::registry) fn throttles(status: reqwest::StatusCode, headers: &HeaderMap) -> bool {
    status == reqwest::StatusCode::TOO_MANY_REQUESTS
        || (status == reqwest::StatusCode::SERVICE_UNAVAILABLE && headers.contains_key(RETRY_AFTER))
}

/// `Retry-After` as seconds or an HTTP date.
pub(in crate::registry) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds.min(24 * 3600)));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().ok()
}

/// A registry's allowance from its `RateLimit-*` headers: the separate fields
/// (`RateLimit-Remaining: 76;w=21600`, `RateLimit-Limit`, `RateLimit-Reset`, as Docker Hub and
/// the IETF draft's early versions send them), or the combined `RateLimit: limit=100,
/// remaining=50, reset=5` and `RateLimit: "default";r=50;t=30` with `RateLimit-Policy:
/// "default";q=100;w=60` of its later ones.
pub(in crate::registry) fn parse_quota(headers: &HeaderMap) -> Option<PullQuota> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let parse = |name: &str| -> Option<(u64, Option<Duration>)> {
        let value = text(name)?;
        let mut parts = value.split(';');
        let count = parts.next()?.trim().parse().ok()?;
        let window = parts
            .filter_map(|p| p.trim().strip_prefix("w="))
            .find_map(|w| w.parse::<u64>().ok())
            .map(Duration::from_secs);
        Some((count, window))
    };
    let param = |name: &str, keys: &[&str]| -> Option<u64> {
        text(name)?.split([',', ';']).find_map(|item| {
            let (key, value) = item.trim().split_once('=')?;
            keys.contains(&key.trim().to_ascii_lowercase().as_str())
                .then(|| value.trim().trim_matches('"').parse().ok())?
        })
    };
    let combined = param("ratelimit", &["remaining", "r"]);
    let (remaining, w1) = match parse("ratelimit-remaining") {
        Some(found) => found,
        None => (combined?, None),
    };
    let (limit, w2) = parse("ratelimit-limit").map(|(l, w)| (Some(l), w)).unwrap_or((None, None));
    let limit = limit.or_else(|| param("ratelimit", &["limit"])).or_else(|| param("ratelimit-policy", &["q"]));
    let window = w1.or(w2).or_else(|| param("ratelimit-policy", &["w"]).map(Duration::from_secs));
    let reset = parse("ratelimit-reset")
        .map(|(r, _)| r)
        .or_else(|| param("ratelimit", &["reset", "t"]))
        .map(|r| Duration::from_secs(r.min(24 * 3600)));
    Some(PullQuota { remaining, limit, window, reset })
}

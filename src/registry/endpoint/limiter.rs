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
use crate::registry::{MAX_BACKOFF, MAX_INLINE_WAIT, RegistryError, whole_seconds};

/// Pull quota a registry reported in `RateLimit-*` headers (Docker Hub: `76;w=21600`).
#[derive(Debug, Clone, Copy)]
pub(in crate::registry) struct PullQuota {
    pub(in crate::registry) remaining: u64,
    pub(in crate::registry) limit: Option<u64>,
    pub(in crate::registry) window: Option<Duration>,
}

impl Endpoint {
    /// Waits out any pause and the rate limiter; fails fast when a pause is too long to wait inline.
    pub(in crate::registry) async fn wait_turn(&self, pull: bool) -> Result<(), RegistryError> {
        let started = Instant::now();
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
                }
                _ => break,
            }
        }
        if let Some(limiter) = &self.limiter {
            limiter.until_ready().await;
        }
        let waited = started.elapsed();
        if !waited.is_zero() {
            self.metrics.rate_limit_wait.get_or_create(&self.labels).inc_by(waited.as_secs_f64());
        }
        Ok(())
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

/// `Retry-After` as seconds or an HTTP date.
pub(in crate::registry) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds.min(24 * 3600)));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().ok()
}

pub(in crate::registry) fn parse_quota(headers: &HeaderMap) -> Option<PullQuota> {
    let parse = |name: &str| -> Option<(u64, Option<Duration>)> {
        let value = headers.get(name)?.to_str().ok()?;
        let mut parts = value.split(';');
        let count = parts.next()?.trim().parse().ok()?;
        let window = parts
            .filter_map(|p| p.trim().strip_prefix("w="))
            .find_map(|w| w.parse::<u64>().ok())
            .map(Duration::from_secs);
        Some((count, window))
    };
    let (remaining, w1) = parse("ratelimit-remaining")?;
    let (limit, w2) = parse("ratelimit-limit").map(|(l, w)| (Some(l), w)).unwrap_or((None, None));
    Some(PullQuota { remaining, limit, window: w1.or(w2) })
}

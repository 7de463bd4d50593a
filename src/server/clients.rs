//! Per-client-address rate limiters whose memory is bounded whatever the number of addresses: idle
//! addresses are forgotten every [`SWEEP_PERIOD`], and at most [`MAX_TRACKED_CLIENTS`] are kept.
//! Past that cap a new address gets no state of its own: every such address shares one overflow
//! bucket with the same quota, so a flood of addresses (an IPv6 prefix holds 2^64) throttles
//! itself and leaves the addresses already known their own buckets.

use std::net::IpAddr;
use std::time::Duration;

use governor::clock::DefaultClock;
use governor::nanos::Nanos;
use governor::state::keyed::{DashMapStateStore, ShrinkableKeyedStateStore};
use governor::state::{InMemoryState, NotKeyed, StateStore};
use governor::{Quota, RateLimiter};

/// Addresses a limiter keeps a bucket for. An entry costs ~50 bytes (address, state, the map's
/// slack), so a full limiter holds ~0.5 MiB; legitimate senders (registries, operators) are a few.
pub const MAX_TRACKED_CLIENTS: usize = 10_000;

/// How often idle addresses are forgotten. A sweep walks the (at most 10,000) entries once.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(10);

/// A keyed rate limiter by client address, with bounded memory.
pub type ClientLimiter = RateLimiter<IpAddr, CappedStore, DefaultClock>;

pub fn limiter(quota: Quota) -> ClientLimiter {
    RateLimiter::new(quota, CappedStore::new(MAX_TRACKED_CLIENTS), DefaultClock::default())
}

/// Drops the addresses whose buckets are full again (indistinguishable from a new address) and
/// gives the freed capacity back.
pub fn forget_idle(limiter: &ClientLimiter) {
    limiter.retain_recent();
    limiter.shrink_to_fit();
}

/// governor's concurrent map of states, capped at `cap` keys, with one shared overflow state.
pub struct CappedStore {
    map: DashMapStateStore<IpAddr>,
    overflow: InMemoryState,
    cap: usize,
}

impl CappedStore {
    fn new(cap: usize) -> Self {
        CappedStore { map: DashMapStateStore::default(), overflow: InMemoryState::default(), cap }
    }
}

impl StateStore for CappedStore {
    type Key = IpAddr;

    fn measure_and_replace<T, F, E>(&self, key: &IpAddr, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        if let Some(state) = self.map.get(key) {
            return state.measure_and_replace(&NotKeyed::NonKey, f);
        }
        // Requests in flight may each pass this check at once: the map can exceed the cap by at
        // most the requests being handled (themselves capped by `max_connections`).
        if self.map.len() >= self.cap {
            return self.overflow.measure_and_replace(&NotKeyed::NonKey, f);
        }
        self.map.entry(*key).or_default().measure_and_replace(&NotKeyed::NonKey, f)
    }
}

impl ShrinkableKeyedStateStore<IpAddr> for CappedStore {
    fn retain_recent(&self, drop_below: Nanos) {
        self.map.retain_recent(drop_below);
    }

    fn shrink_to_fit(&self) {
        ShrinkableKeyedStateStore::shrink_to_fit(&self.map);
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::num::NonZeroU32;

    use governor::clock::FakeRelativeClock;
    use governor::middleware::NoOpMiddleware;

    use super::*;

    fn address(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))
    }

    #[test]
    fn past_the_cap_new_addresses_share_one_bucket_and_known_ones_keep_theirs() {
        let clock = FakeRelativeClock::default();
        let limiter: RateLimiter<IpAddr, CappedStore, FakeRelativeClock, NoOpMiddleware<Nanos>> =
            RateLimiter::new(Quota::per_hour(NonZeroU32::MIN), CappedStore::new(3), clock.clone());
        for i in 0..3 {
            assert!(limiter.check_key(&address(i)).is_ok());
        }
        assert!(limiter.check_key(&address(100)).is_ok(), "the overflow bucket's one cell");
        assert!(limiter.check_key(&address(101)).is_err(), "shared with every other new address");
        assert!(limiter.check_key(&address(0)).is_err(), "a known address keeps its own (spent) bucket");
        assert_eq!(limiter.len(), 3);

        // Full again after an hour; governor forgets a bucket one period after that.
        clock.advance(Duration::from_secs(2 * 3600 - 1));
        limiter.retain_recent();
        assert_eq!(limiter.len(), 3, "not yet");
        clock.advance(Duration::from_secs(1));
        limiter.retain_recent();
        assert_eq!(limiter.len(), 0);
        assert!(limiter.check_key(&address(101)).is_ok(), "room again: its own bucket");
        assert_eq!(limiter.len(), 1);
    }
}

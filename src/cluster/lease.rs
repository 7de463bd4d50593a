//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go does it: acquire a free or
//! expired lease, renew it every retry period, stop leading when renewals fail for the renew deadline.
//!
//! Expiry is judged by when *this* replica last saw the lease change (its resourceVersion), never by
//! comparing another node's `renewTime` with our clock, so clock skew between nodes cannot shorten a
//! lease. Every write carries the resourceVersion it read, so two candidates can never both win.
//!
//! A write answered 409 (someone wrote the Lease since it was read) is followed by a read: when
//! that shows another holder, the lease is lost then and there — a leader steps down at once
//! (`leading` turns false, which fences the ledger's and the runner's writes), not after another
//! retry period. A read or write the cluster refuses for a right RBAC does not grant is listed as
//! missing (`rights::noted`: `/readyz`, `status`, one log line) and tried again every
//! retry period: a leader that cannot renew steps down after the renew deadline, as it must, and
//! leads again once the right is back.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::KubernetesSettings;

/// What one attempt to take or renew the lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the lease until at least `lease_duration` from now.
    Held,
    /// Another replica holds an unexpired lease.
    HeldBy(String),
    /// Someone wrote the lease between our read and our write; try again.
    Conflict,
}

/// The part of a Lease the decision depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub holder: Option<String>,
    pub resource_version: Option<String>,
    pub duration: Duration,
}

/// Whether `me` may write the lease now: it is ours, free, or unchanged for longer than its duration.
pub fn may_take(observed: &Observed, me: &str, unchanged_for: Duration) -> bool {
    match observed.holder.as_deref() {
        None | Some("") => true,
        Some(holder) if holder == me => true,
        Some(_) => unchanged_for >= observed.duration,
    }
}

pub struct LeaseElector {
    api: Api<Lease>,
    client: kube::Client,
    name: String,
    identity: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
    /// The lease as last read, and when its resourceVersion last changed (by our clock).
    observed: Option<(Observed, Instant)>,
}

impl LeaseElector {
    pub fn new(client: kube::Client, settings: &KubernetesSettings) -> Self {
        LeaseElector {
            api: Api::namespaced(client.clone(), &settings.namespace),
            client,
            name: settings.lease_name.clone(),
            identity: settings.identity.clone(),
            lease_duration: settings.lease_duration,
            renew_deadline: settings.renew_deadline,
            retry_period: settings.retry_period,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn observe(&mut self, lease: &Lease) -> (Observed, Duration) {
        let spec = lease.spec.clone().unwrap_or_default();
        let observed = Observed {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            resource_version: lease.metadata.resource_version.clone(),
            duration: spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs)
                .unwrap_or(self.lease_duration),
        };
        let now = Instant::now();
        let since = match &self.observed {
            Some((previous, at)) if previous.resource_version == observed.resource_version => *at,
            _ => now,
        };
        self.observed = Some((observed.clone(), since));
        (observed, now - since)
    }

    fn spec(&self, previous: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
        let ours = previous.is_some_and(|p| p.holder_identity.as_deref() == Some(self.identity.as_str()));
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration.as_secs().max(1).min(i32::MAX as u64) as i32),
            acquire_time: if ours { previous.and_then(|p| p.acquire_time.clone()) } else { Some(MicroTime(now)) },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(if ours || previous.is_none() { transitions } else { transitions + 1 }),
            ..Default::default()
        }
    }

    /// One read and, when allowed, one write of the lease.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    labels: Some([("app.kubernetes.io/managed-by".to_string(), "builder-monitor".to_string())].into()),
                    ..Default::default()
                },
                spec: Some(self.spec(None, now)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created);
                    Ok(Attempt::Held)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => self.after_conflict().await,
                Err(e) => Err(e),
            };
        };
        let (observed, unchanged_for) = self.observe(&lease);
        if !may_take(&observed, &self.identity, unchanged_for) {
            return Ok(Attempt::HeldBy(observed.holder.unwrap_or_default()));
        }
        lease.spec = Some(self.spec(lease.spec.as_ref(), now));
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(replaced) => {
                self.observe(&replaced);
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => self.after_conflict().await,
            Err(e) => Err(e),
        }
    }

    /// After a write answered 409: the lease read again; another holder there means it is lost
    /// now (whether that holder may have taken it is theirs to have judged).
    async fn after_conflict(&mut self) -> Result<Attempt, kube::Error> {
        let Some(lease) = self.api.get_opt(&self.name).await? else { return Ok(Attempt::Conflict) };
        let (observed, _) = self.observe(&lease);
        match observed.holder {
            Some(holder) if holder != self.identity => Ok(Attempt::HeldBy(holder)),
            _ => Ok(Attempt::Conflict),
        }
    }

    /// An error of an attempt, logged unless it is a right refused, which is listed instead.
    async fn failed(&self, error: &kube::Error, what: &str) {
        if !crate::rights::noted(&self.client, error, "the leader Lease").await {
            tracing::warn!(lease = %self.name, error = %error, "{what}");
        }
    }

    /// Gives the lease up so a standby takes over at once instead of after it expires.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else { return Ok(()) };
        let Some(spec) = lease.spec.as_mut() else { return Ok(()) };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        self.api.replace(&self.name, &PostParams::default(), &lease).await.map(|_| ())
    }

    /// Campaigns until `resign`: publishes `true` on `leading` while this replica holds the lease,
    /// `false` as soon as it may no longer act. Releases the lease when resigning while leading.
    pub async fn run(mut self, leading: watch::Sender<bool>, resign: CancellationToken) {
        let mut leader_seen = String::new();
        loop {
            // Standby: try every retry period until the lease is ours.
            loop {
                match self.try_acquire_or_renew().await {
                    Ok(Attempt::Held) => break,
                    Ok(Attempt::HeldBy(holder)) => {
                        if holder != leader_seen {
                            tracing::info!(lease = %self.name, holder = %holder, "standing by; another replica leads");
                            leader_seen = holder;
                        }
                    }
                    Ok(Attempt::Conflict) => {}
                    Err(err) => self.failed(&err, "cannot read or take the lease").await,
                }
                if !pause(&resign, self.retry_period).await {
                    return;
                }
            }
            tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
            leader_seen.clear();
            leading.send_replace(true);
            let mut renewed = Instant::now();
            let lost = loop {
                if !pause(&resign, self.retry_period).await {
                    leading.send_replace(false);
                    match self.release().await {
                        Ok(()) => tracing::info!(lease = %self.name, "released the lease"),
                        Err(err) => {
                            tracing::warn!(lease = %self.name, error = %err, "cannot release the lease; it expires on its own")
                        }
                    }
                    return;
                }
                let left = self.renew_deadline.saturating_sub(renewed.elapsed());
                match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                    Ok(Ok(Attempt::Held)) => renewed = Instant::now(),
                    Ok(Ok(Attempt::HeldBy(holder))) => break format!("the lease is held by {holder}"),
                    Ok(Ok(Attempt::Conflict)) => {}
                    Ok(Err(err)) => self.failed(&err, "cannot renew the lease").await,
                    Err(_) => {}
                }
                if renewed.elapsed() >= self.renew_deadline {
                    break format!("not renewed for {}", humantime::format_duration(self.renew_deadline));
                }
            };
            leading.send_replace(false);
            tracing::warn!(lease = %self.name, why = %lost, "lost leadership");
        }
    }
}

/// Waits `period` (with up to 20% jitter so replicas do not write in step); false on `resign`.
async fn pause(resign: &CancellationToken, period: Duration) -> bool {
    let jitter = period.mul_f64(rand::random::<f64>() * 0.2);
    tokio::select! {
        _ = resign.cancelled() => false,
        _ = tokio::time::sleep(period + jitter) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: Option<&str>) -> Observed {
        Observed {
            holder: holder.map(str::to_string),
            resource_version: Some("1".into()),
            duration: Duration::from_secs(15),
        }
    }

    #[test]
    fn free_own_and_expired_leases_may_be_taken() {
        let s = Duration::from_secs;
        assert!(may_take(&held_by(None), "a", s(0)));
        assert!(may_take(&held_by(Some("")), "a", s(0)));
        assert!(may_take(&held_by(Some("a")), "a", s(0)));
        assert!(!may_take(&held_by(Some("b")), "a", s(0)));
        assert!(!may_take(&held_by(Some("b")), "a", s(14)));
        assert!(may_take(&held_by(Some("b")), "a", s(15)));
    }
}

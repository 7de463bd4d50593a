//! Rights taken away from the running daemon: a cluster call answered 403 Forbidden names the
//! missing right (verb, resource, namespace), the call's action waits for it — asking the server
//! again by SelfSubjectAccessReview every [`RECHECK`] — and resumes when the right is back,
//! without a restart. While it waits the right is listed here, for `/readyz` (degraded, the right
//! named); one log line says it is missing, one that it is back.
//!
//! The list is the process's: one daemon, one set of credentials, read by the server's probes.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use kube::api::Api;

/// How often a missing right is asked for again: RBAC changes send the daemon no event it may
/// watch (its Role grants no read of Roles).
pub const RECHECK: Duration = Duration::from_secs(2);

/// A right the server refused: `verb` on `resource` (`deployments.apps`, a subresource after
/// `/`), in `namespace` or (`None`) cluster-wide.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct MissingRight {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub namespace: Option<String>,
}

impl std::fmt::Display for MissingRight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resource = match self.resource.split_once('/') {
            _ if self.group.is_empty() => self.resource.clone(),
            Some((r, sub)) => format!("{r}.{}/{sub}", self.group),
            None => format!("{}.{}", self.resource, self.group),
        };
        match &self.namespace {
            Some(ns) => write!(f, "{} {resource} in namespace \"{ns}\"", self.verb),
            None => write!(f, "{} {resource} cluster-wide", self.verb),
        }
    }
}

/// The right a 403 names: the server's message says `User "…" cannot VERB resource "R" in API
/// group "G" in the namespace "N"` (or `at the cluster scope`). `None` for any other error.
pub fn refused(error: &kube::Error) -> Option<MissingRight> {
    let kube::Error::Api(status) = error else { return None };
    if status.code != 403 {
        return None;
    }
    let message = &status.message;
    let after = |marker: &str| -> Option<&str> {
        let rest = &message[message.find(marker)? + marker.len()..];
        rest.split('"').next()
    };
    let verb = message.split(" cannot ").nth(1)?.split_whitespace().next()?;
    Some(MissingRight {
        verb: verb.to_string(),
        resource: after("resource \"")?.to_string(),
        group: after("in API group \"").unwrap_or_default().to_string(),
        namespace: after("in the namespace \"").map(str::to_string),
    })
}

/// The rights missing now, each with what waits for it first and how many wait.
static MISSING: Mutex<BTreeMap<MissingRight, (String, usize)>> = Mutex::new(BTreeMap::new());

/// The rights missing now, as `/readyz` names them (`patch deployments.apps in namespace "x"
/// (for image "shop"'s deploy)`).
pub fn missing() -> Vec<String> {
    let missing = MISSING.lock().unwrap_or_else(|e| e.into_inner());
    missing.iter().map(|(right, (what, _))| format!("{right} (for {what})")).collect()
}

/// Listed while it lives: logs once when a right goes missing and once when it is back (or no
/// longer waited for).
pub struct Waiting {
    right: MissingRight,
}

impl Waiting {
    /// `right` is missing for `what`; a right already listed is not logged again.
    pub fn new(right: MissingRight, what: &str) -> Self {
        let mut missing = MISSING.lock().unwrap_or_else(|e| e.into_inner());
        let waiters = missing.entry(right.clone()).or_insert_with(|| {
            tracing::warn!(right = %right, waiting = what, "the cluster refused a right the daemon needs: what needs it waits until it is granted again (see /readyz and `status`; `builder-monitor rbac` prints the rules)");
            (what.to_string(), 0)
        });
        waiters.1 += 1;
        Waiting { right }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut missing = MISSING.lock().unwrap_or_else(|e| e.into_inner());
        let Some(waiters) = missing.get_mut(&self.right) else { return };
        waiters.1 -= 1;
        if waiters.1 == 0 {
            missing.remove(&self.right);
            tracing::info!(right = %self.right, "the right is granted again: what waited for it resumes");
        }
    }
}

/// Whether the server grants `right` to this account now, by a SelfSubjectAccessReview; `None`
/// when the review cannot be had (the server does not answer).
pub async fn allowed_now(client: &kube::Client, right: &MissingRight) -> Option<bool> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let (resource, subresource) = match right.resource.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (right.resource.as_str(), None),
    };
    let attributes = super::Attributes {
        namespace: right.namespace.as_deref(),
        verb: &right.verb,
        group: &right.group,
        resource,
        subresource,
    };
    super::allowed(&reviews, attributes, None).await.ok()
}

/// Returns once the server grants `right` to this account, asking every [`RECHECK`]. A review
/// that fails (the server does not answer) is asked again.
pub async fn granted(client: &kube::Client, right: &MissingRight) {
    loop {
        tokio::time::sleep(RECHECK).await;
        if allowed_now(client, right).await == Some(true) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden(message: &str) -> kube::Error {
        kube::Error::Api(kube::core::Status::failure(message, "Forbidden").with_code(403).boxed())
    }

    #[test]
    fn a_403_names_the_right() {
        let e = forbidden(
            "deployments.apps \"web\" is forbidden: User \"system:serviceaccount:a:b\" cannot patch resource \"deployments\" in API group \"apps\" in the namespace \"shop\"",
        );
        let right = refused(&e).unwrap();
        assert_eq!(right.to_string(), "patch deployments.apps in namespace \"shop\"");
        let e = forbidden(
            "configmaps \"x\" is forbidden: User \"u\" cannot update resource \"configmaps\" in API group \"\" in the namespace \"bm\"",
        );
        assert_eq!(refused(&e).unwrap().to_string(), "update configmaps in namespace \"bm\"");
        let e = forbidden(
            "clusterbuilders.buildermonitor.dev \"j\" is forbidden: User \"u\" cannot patch resource \"clusterbuilders/status\" in API group \"buildermonitor.dev\" at the cluster scope",
        );
        assert_eq!(refused(&e).unwrap().to_string(), "patch clusterbuilders.buildermonitor.dev/status cluster-wide");
        let mut other = forbidden("no");
        if let kube::Error::Api(s) = &mut other {
            s.code = 409;
        }
        assert_eq!(refused(&other), None);
    }

    #[test]
    fn a_right_is_listed_while_waited_for() {
        let right = refused(&forbidden(
            "x is forbidden: User \"u\" cannot delete resource \"secrets\" in API group \"\" in the namespace \"unit\"",
        ))
        .unwrap();
        let first = Waiting::new(right.clone(), "a test");
        let second = Waiting::new(right, "a test");
        let shown = "delete secrets in namespace \"unit\" (for a test)".to_string();
        assert!(missing().contains(&shown));
        drop(first);
        assert!(missing().contains(&shown), "the second still waits");
        drop(second);
        assert!(!missing().contains(&shown));
    }
}

//! Rights taken away from the running daemon: a cluster call answered 403 Forbidden names the
//! missing right (verb, resource, namespace); when a SelfSubjectAccessReview confirms RBAC does
//! not grant it (a 403 it does not explain — an admission webhook's — is an ordinary error), the
//! right is listed here for `/readyz` (degraded, the right named) and `status` (the file
//! [`report_to`] names), with one log line when it goes missing and one when it is back. The
//! server is asked again every [`RECHECK`]; nothing needs a restart.
//!
//! Every cluster call of the daemon goes through one of two wrappers, chosen by who retries:
//! - [`when_granted`]: the call waits for the right and is then made again. For the writes whose
//!   caller has no retry of its own and must not lose them: the runner's Job, kpack Build and
//!   Kueue creates, the ConfigMap ledger's writes (a check's commit, an action's end: dropped,
//!   they would be lost until a restart), a deploy's workload write (`runner::deploy`, which also
//!   records the wait in the deploy's progress). Only the task making the call waits: each check,
//!   action and delivery runs in a task of its own, so every other watch and action goes on —
//!   as far as it does not need the same right (the ledger's `update configmaps` is needed by
//!   every check that changes something: those wait, all, and resume in order once granted).
//! - [`noted`]: the right is listed (and rechecked in the background until granted), the error
//!   returned. For the calls that run in a loop retrying anyway, where waiting would stall the
//!   loop's other work or hang a reader: the leader Lease (a leader that cannot renew steps down
//!   after the renew deadline, as it must; it leads again once the right is back), ClusterBuilder
//!   publishing (its failed builders are retried), the ledger's reads (a read for `status`, the
//!   API or the page answers an error rather than hanging), and the deploy reads.
//!
//! The list is the process's: one daemon, one set of credentials, read by the server's probes.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::api::{Api, PostParams};

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

/// The rights [`noted`] and rechecked in the background until granted.
static NOTED: Mutex<BTreeSet<MissingRight>> = Mutex::new(BTreeSet::new());

/// Where the list is written for `status` (the daemon's state directory), once set.
static REPORT: OnceLock<PathBuf> = OnceLock::new();

/// The file in the state directory `dir` where the running daemon keeps its missing rights.
pub fn report_file(dir: &std::path::Path) -> PathBuf {
    dir.join("missing-rights.json")
}

/// The daemon keeps its list in [`report_file`] of `dir`, for `status` (another process) to read;
/// a file a daemon before it left is removed.
pub fn report_to(dir: &std::path::Path) {
    let path = report_file(dir);
    let _ = std::fs::remove_file(&path);
    let _ = REPORT.set(path);
}

/// Writes the list where [`report_to`] says, or removes the file when nothing is missing.
fn write_report(missing: &BTreeMap<MissingRight, (String, usize)>) {
    let Some(path) = REPORT.get() else { return };
    if missing.is_empty() {
        let _ = std::fs::remove_file(path);
        return;
    }
    let report = Report { pid: std::process::id(), missing: shown(missing) };
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, serde_json::to_vec(&report).unwrap_or_default()));
    if let Err(error) = written {
        tracing::debug!(path = %path.display(), error = %error, "cannot keep the missing rights for `status`");
    }
}

/// What [`report_file`] holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Report {
    /// The daemon's process: a file whose process is gone is not shown.
    pid: u32,
    missing: Vec<String>,
}

/// The rights the daemon running with state directory `dir` lists as missing (empty when it
/// lists none, or is not running there).
pub fn reported(dir: &std::path::Path) -> Vec<String> {
    let Ok(text) = std::fs::read(report_file(dir)) else { return Vec::new() };
    let Ok(report) = serde_json::from_slice::<Report>(&text) else { return Vec::new() };
    let gone = cfg!(target_os = "linux") && !std::path::Path::new(&format!("/proc/{}", report.pid)).exists();
    if gone { Vec::new() } else { report.missing }
}

fn shown(missing: &BTreeMap<MissingRight, (String, usize)>) -> Vec<String> {
    missing.iter().map(|(right, (what, _))| format!("{right} (for {what})")).collect()
}

/// The rights missing now, as `/readyz` names them (`patch deployments.apps in namespace "x"
/// (for image "shop"'s deploy)`).
pub fn missing() -> Vec<String> {
    shown(&MISSING.lock().unwrap_or_else(|e| e.into_inner()))
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
        if waiters.1 == 1 {
            write_report(&missing);
        }
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
            write_report(&missing);
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
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: right.namespace.clone(),
                verb: Some(right.verb.clone()),
                group: Some(right.group.clone()),
                resource: Some(resource.to_string()),
                subresource: subresource.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = reviews.create(&PostParams::default(), &review).await.ok()?;
    Some(answer.status.is_some_and(|s| s.allowed))
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

/// The right `error` names when RBAC explains it: a 403 for a right a SelfSubjectAccessReview
/// says this account lacks. `None` for any other error, and for a 403 RBAC does not explain (an
/// admission webhook's refusal, or the review cannot be had): waiting for a right already held
/// would never end.
pub async fn missing_for(client: &kube::Client, error: &kube::Error) -> Option<MissingRight> {
    let right = refused(error)?;
    (allowed_now(client, &right).await == Some(false)).then_some(right)
}

/// Makes `call`, and again each time the right its 403 names is granted again, while RBAC
/// explains the refusal ([`missing_for`]); the right is listed as missing for `what` meanwhile.
/// Any other answer is returned.
pub async fn when_granted<T, F, Fut>(client: &kube::Client, what: &str, mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    loop {
        let error = match call().await {
            Ok(answer) => return Ok(answer),
            Err(error) => error,
        };
        let Some(right) = missing_for(client, &error).await else { return Err(error) };
        let _waiting = Waiting::new(right.clone(), what);
        granted(client, &right).await;
    }
}

/// Whether `error` is a refusal RBAC explains: the right is then listed as missing for `what`
/// until a recheck in the background finds it granted (one log line each way), and the caller,
/// which retries on its own, should not log the error again. A right noted already is not asked
/// about again.
pub async fn noted(client: &kube::Client, error: &kube::Error, what: &str) -> bool {
    let Some(right) = refused(error) else { return false };
    if NOTED.lock().unwrap_or_else(|e| e.into_inner()).contains(&right) {
        return true;
    }
    if allowed_now(client, &right).await != Some(false) {
        return false;
    }
    if !NOTED.lock().unwrap_or_else(|e| e.into_inner()).insert(right.clone()) {
        return true;
    }
    let waiting = Waiting::new(right.clone(), what);
    let client = client.clone();
    tokio::spawn(async move {
        granted(&client, &right).await;
        NOTED.lock().unwrap_or_else(|e| e.into_inner()).remove(&right);
        drop(waiting);
    });
    true
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

//! A command's failure and the exit code it maps to (2 for usage and invalid config, 1 for runtime
//! failures), and the one-line text `main` prints for it.

/// A failure with the exit code it maps to.
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure { code: 1, error: error.into() }
    }
}

/// A usage error or an invalid config: exit 2.
pub fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure { code: 2, error: error.into() }
}

/// The error and its causes, `: `-separated, each said once: many of our messages (and other
/// crates') already end with their cause's text, which `{:#}` would then print a second time.
pub fn error_text(error: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut previous = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text.clone();
        } else if !text.is_empty() && !previous.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        previous = text;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that says its cause and also returns it from `source()`, as many crates' do.
    #[derive(Debug, thiserror::Error)]
    #[error("cannot read {path}: {source}")]
    struct Wrapped {
        path: &'static str,
        source: std::io::Error,
    }

    fn not_found() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::NotFound)
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = not_found().to_string();
        let wrapped = anyhow::Error::new(Wrapped { path: "x", source: not_found() });
        assert_eq!(error_text(&wrapped), format!("cannot read x: {io}"));
        // A context that does not say its cause still gets it.
        let context = anyhow::Error::new(not_found()).context("cannot listen on 127.0.0.1:1");
        assert_eq!(error_text(&context), format!("cannot listen on 127.0.0.1:1: {io}"));
        let both = anyhow::Error::new(Wrapped { path: "y", source: not_found() }).context("starting");
        assert_eq!(error_text(&both), format!("starting: cannot read y: {io}"));
    }

    /// The typed errors at the boundaries: a cause in the message and in `source()` is said once,
    /// and the ledger's and the cluster's kube causes stay out of `source()` (their convention).
    #[test]
    fn typed_boundary_errors_say_each_cause_once() {
        use builder_monitor::cluster::ClusterError;
        use builder_monitor::config::KubeValueError;
        use builder_monitor::daemon::DaemonError;
        use builder_monitor::ledger::LedgerError;
        use builder_monitor::runner::{PreviewError, RunnerError};
        use std::error::Error as _;

        let setup = anyhow::Error::new(DaemonError::Runner(RunnerError::NoClient("kpack")));
        assert_eq!(error_text(&setup), "cannot set up the runner: runner type \"kpack\" needs a Kubernetes client");
        let invalid = RunnerError::InvalidJob { source: KubeValueError::UnknownField("spec.x".into()) };
        let preview = anyhow::Error::new(PreviewError::Object(invalid));
        assert_eq!(error_text(&preview), "the generated Job is not valid: unknown field `spec.x`");

        let io = not_found().to_string();
        let kube = || kube::Error::ReadEvents(not_found());
        let ledger = LedgerError::Kubernetes(kube());
        assert!(ledger.source().is_none());
        let ledger = anyhow::Error::new(DaemonError::Ledger(ledger));
        assert_eq!(error_text(&ledger), format!("ledger on Kubernetes: Error reading events stream: {io}"));
        let cluster = ClusterError::Apply { name: "jammy".into(), error: kube().into() };
        assert!(cluster.source().is_none());
        assert_eq!(
            error_text(&anyhow::Error::new(DaemonError::Cluster(cluster))),
            format!("Kubernetes API: cannot apply ClusterBuilder jammy: Error reading events stream: {io}")
        );
    }
}

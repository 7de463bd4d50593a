//! One writer per blob and repository: what this process has put into which repository (layers
//! mounted or copied, configs uploaded, manifests PUT by digest), so a fleet in one repository
//! writes each once; and, for the few blobs every repository takes alike (the OCI empty config of
//! every signature bundle referrer), one repository of each registry that holds it as uploaded
//! here, so the other repositories mount it instead of uploading it again.
//!
//! Distribution rewrites a repository's link file for a blob on every mount or upload of it, and a
//! manifest PUT that reads the link while it is rewritten fails (`400 DIGEST_INVALID`). So within
//! the process a content write into a repository is made by one task at a time (the others wait for
//! its answer), and not again once it succeeded. What is kept is bounded by entries and forgotten
//! when idle; an answer that says the content is not there (a 404, `BLOB_UNKNOWN`) forgets it, so it
//! can never make a rebase skip a blob a registry lost.

use std::sync::Mutex;
use std::time::Duration;

use super::RegistryError;

/// Contents remembered at most (a fleet's configs and manifests, and the run image's layers once
/// per repository); beyond it the least useful are dropped and at worst written again.
const MAX_ENTRIES: u64 = 16_384;
/// Forgotten when unused this long: the knowledge is for one fleet patch, not for good.
const IDLE: Duration = Duration::from_secs(10 * 60);

/// The contents this process wrote into repositories, by registry, repository and digest.
pub(super) struct Written {
    known: moka::future::Cache<String, ()>,
    /// For shared blobs, by registry and digest: a repository this process uploaded it to.
    holders: moka::future::Cache<String, String>,
}

/// Shared blobs whose holder is remembered: a handful in practice.
const MAX_HOLDERS: u64 = 256;

impl Default for Written {
    fn default() -> Self {
        Written {
            known: moka::future::Cache::builder().max_capacity(MAX_ENTRIES).time_to_idle(IDLE).build(),
            holders: moka::future::Cache::builder().max_capacity(MAX_HOLDERS).time_to_idle(IDLE).build(),
        }
    }
}

/// Where a shared blob is, as [`Written::holder`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Holder {
    /// This call uploaded it (into its own repository).
    Uploaded,
    /// Another call did, earlier or meanwhile: into this repository.
    In(String),
}

fn key(registry: &str, repository: &str, digest: &str) -> String {
    format!("{registry}/{repository}@{digest}")
}

impl Written {
    /// Runs `write` (which puts `digest` into `repository` of `registry`) unless the content is
    /// known to be there, or another task is writing it now (then waits for that write's answer).
    /// `Some` with the write's result when this call made it; `None` when it did not have to.
    /// Both callers of a failed write get its error, and nothing is remembered.
    pub(super) async fn once<T>(
        &self,
        registry: &str,
        repository: &str,
        digest: &str,
        write: impl Future<Output = Result<T, RegistryError>>,
    ) -> Result<Option<T>, RegistryError> {
        let key = key(registry, repository, digest);
        if self.known.get(&key).await.is_some() {
            return Ok(None);
        }
        let made = Mutex::new(None);
        let init = async {
            let value = write.await?;
            *made.lock().unwrap_or_else(|e| e.into_inner()) = Some(value);
            Ok::<_, RegistryError>(())
        };
        self.known.try_get_with(key, init).await.map_err(|e| (*e).clone())?;
        Ok(made.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// A repository of `registry` that holds the shared blob `digest`: `upload` (into the caller's
    /// own repository, answering its name) runs unless one is known, or another task's upload is
    /// under way (then this waits for its answer). A failed upload is not remembered.
    pub(super) async fn holder(
        &self,
        registry: &str,
        digest: &str,
        upload: impl Future<Output = Result<String, RegistryError>>,
    ) -> Result<Holder, RegistryError> {
        let made = std::sync::atomic::AtomicBool::new(false);
        let init = async {
            let repository = upload.await?;
            made.store(true, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, RegistryError>(repository)
        };
        let repository =
            self.holders.try_get_with(format!("{registry}@{digest}"), init).await.map_err(|e| (*e).clone())?;
        Ok(if made.into_inner() { Holder::Uploaded } else { Holder::In(repository) })
    }

    /// The holder of a shared blob could not give it (a mount refused): the next write uploads it.
    pub(super) async fn forget_holder(&self, registry: &str, digest: &str) {
        self.holders.invalidate(&format!("{registry}@{digest}")).await;
    }

    /// Whether the content is known to be in the repository.
    #[cfg(test)]
    pub(super) async fn knows(&self, registry: &str, repository: &str, digest: &str) -> bool {
        self.known.get(&key(registry, repository, digest)).await.is_some()
    }

    /// The registry said the content is not there (or may not be): the next write makes it again.
    pub(super) async fn forget(&self, registry: &str, repository: &str, digest: &str) {
        self.known.invalidate(&key(registry, repository, digest)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn failure() -> RegistryError {
        RegistryError::Unavailable { registry: "r".into(), detail: "down".into() }
    }

    #[tokio::test]
    async fn concurrent_writes_of_one_content_are_one_write_and_the_next_is_none() {
        let written = Written::default();
        let writes = AtomicUsize::new(0);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = written.once("r", "apps", "sha256:1", async {
            writes.fetch_add(1, Ordering::SeqCst);
            released.await.unwrap();
            Ok("mounted")
        });
        let second = written.once("r", "apps", "sha256:1", async {
            writes.fetch_add(1, Ordering::SeqCst);
            Ok("mounted again")
        });
        let releaser = async {
            // Both wait on the first write before it answers.
            tokio::task::yield_now().await;
            release.send(()).unwrap();
        };
        let (a, b, ()) = tokio::join!(first, second, releaser);
        assert_eq!(writes.load(Ordering::SeqCst), 1, "one write for both callers");
        let mut answers = [a.unwrap(), b.unwrap()];
        answers.sort();
        assert_eq!(answers, [None, Some("mounted")], "the writer gets its answer, the waiter none");
        let third = written.once("r", "apps", "sha256:1", async { Ok("again") }).await.unwrap();
        assert_eq!(third, None, "known to be there: not written again");
        assert!(written.knows("r", "apps", "sha256:1").await);
    }

    #[tokio::test]
    async fn the_key_is_registry_repository_and_digest() {
        let written = Written::default();
        assert_eq!(written.once("r", "apps", "sha256:1", async { Ok(1) }).await.unwrap(), Some(1));
        assert_eq!(written.once("r", "other", "sha256:1", async { Ok(2) }).await.unwrap(), Some(2));
        assert_eq!(written.once("q", "apps", "sha256:1", async { Ok(3) }).await.unwrap(), Some(3));
        assert_eq!(written.once("r", "apps", "sha256:2", async { Ok(4) }).await.unwrap(), Some(4));
    }

    #[tokio::test]
    async fn a_failed_write_is_not_remembered_and_a_forgotten_one_is_made_again() {
        let written = Written::default();
        let err = written.once("r", "apps", "sha256:1", async { Err::<(), _>(failure()) }).await.unwrap_err();
        assert_eq!(err.to_string(), failure().to_string());
        assert!(!written.knows("r", "apps", "sha256:1").await);
        assert_eq!(written.once("r", "apps", "sha256:1", async { Ok(1) }).await.unwrap(), Some(1));
        written.forget("r", "apps", "sha256:1").await;
        assert_eq!(written.once("r", "apps", "sha256:1", async { Ok(2) }).await.unwrap(), Some(2));
    }

    #[tokio::test]
    async fn a_shared_blob_is_uploaded_once_per_registry_and_found_there_after() {
        let written = Written::default();
        let uploads = AtomicUsize::new(0);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = written.holder("r", "sha256:e", async {
            uploads.fetch_add(1, Ordering::SeqCst);
            released.await.unwrap();
            Ok("apps/a".to_string())
        });
        let second = written.holder("r", "sha256:e", async {
            uploads.fetch_add(1, Ordering::SeqCst);
            Ok("apps/b".to_string())
        });
        let releaser = async {
            tokio::task::yield_now().await;
            release.send(()).unwrap();
        };
        let (a, b, ()) = tokio::join!(first, second, releaser);
        assert_eq!(uploads.load(Ordering::SeqCst), 1, "one upload while another waits for it");
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(
            (a == Holder::Uploaded && b == Holder::In("apps/a".into()))
                || (b == Holder::Uploaded && a == Holder::In("apps/b".into())),
            "{a:?} {b:?}"
        );
        let other = written.holder("q", "sha256:e", async { Ok("apps/c".to_string()) }).await.unwrap();
        assert_eq!(other, Holder::Uploaded, "per registry");
        let err = written.holder("r", "sha256:f", async { Err(failure()) }).await.unwrap_err();
        assert_eq!(err.to_string(), failure().to_string());
        written.forget_holder("r", "sha256:e").await;
        let again = written.holder("r", "sha256:e", async { Ok("apps/d".to_string()) }).await.unwrap();
        assert_eq!(again, Holder::Uploaded, "forgotten: uploaded again");
    }

    #[tokio::test]
    async fn what_is_remembered_is_bounded() {
        let written = Written::default();
        for i in 0..MAX_ENTRIES * 2 {
            written.once("r", "apps", &format!("sha256:{i}"), async { Ok(()) }).await.unwrap();
        }
        written.known.run_pending_tasks().await;
        assert!(written.known.entry_count() <= MAX_ENTRIES, "{}", written.known.entry_count());
    }
}

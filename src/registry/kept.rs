//! The app images' manifests and configs planning read, kept by digest for the rebases that follow:
//! a fleet patch reads each app once, not once to plan and again to rebase.
//!
//! Content-addressed (keyed by registry, repository and digest, so a read proves access to that
//! repository only), hence never stale; a read by tag is never answered from here. Bounded by bytes
//! and forgotten when idle: a miss costs the read it saved, nothing else.

use std::time::Duration;

use super::Manifest;

/// Bytes of documents kept at most: a fleet's manifests and configs (a few KiB each) while its
/// rebases follow its planning.
const MAX_BYTES: u64 = 8 << 20;
/// A document larger than this is not kept (it would push out dozens of others).
const MAX_DOCUMENT: usize = 256 << 10;
/// Forgotten when unused this long: the knowledge is for one fleet patch.
const IDLE: Duration = Duration::from_secs(10 * 60);

pub(super) struct Kept {
    docs: moka::future::Cache<String, Manifest>,
}

impl Default for Kept {
    fn default() -> Self {
        let docs = moka::future::Cache::builder()
            .max_capacity(MAX_BYTES)
            .weigher(|key: &String, m: &Manifest| u32::try_from(key.len() + m.bytes.len()).unwrap_or(u32::MAX))
            .time_to_idle(IDLE)
            .build();
        Kept { docs }
    }
}

fn key(registry: &str, repository: &str, digest: &str) -> String {
    format!("{registry}/{repository}@{digest}")
}

impl Kept {
    pub(super) async fn get(&self, registry: &str, repository: &str, digest: &str) -> Option<Manifest> {
        self.docs.get(&key(registry, repository, digest)).await
    }

    /// Keeps `doc` (its digest checked by the read that got it), unless it is too large.
    pub(super) async fn keep(&self, registry: &str, repository: &str, doc: &Manifest) {
        if doc.bytes.len() <= MAX_DOCUMENT {
            self.docs.insert(key(registry, repository, &doc.digest), doc.clone()).await;
        }
    }
}

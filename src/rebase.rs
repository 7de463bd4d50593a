//! Registry rebase: swaps the run-image layers under an app image's layers by writing a new config
//! and manifest (and index), then moving the tag. The decisions are the core's; this is the I/O.
// STUB: replaced by wip/rio at merge

use builder_monitor_core::reference::ImageRef;
use serde::Serialize;

use crate::registry::{Registry, RegistryError};

/// What to rebase onto what.
// STUB: replaced by wip/rio at merge
#[derive(Debug, Clone)]
pub struct RebaseRequest {
    pub image: ImageRef,
    pub run_image: ImageRef,
    pub force: bool,
    pub dry_run: bool,
}

/// What a rebase did (`rebase --json`).
// STUB: replaced by wip/rio at merge
#[derive(Debug, Clone, Serialize)]
pub struct RebaseReport {
    pub image: String,
    pub previous: String,
    /// None with `--dry-run`; equal to `previous` when the app already sat on the run image.
    pub digest: Option<String>,
    pub reference: String,
    pub platforms: Vec<PlatformReport>,
    pub blobs: BlobCounts,
}

// STUB: replaced by wip/rio at merge
#[derive(Debug, Clone, Serialize)]
pub struct PlatformReport {
    pub platform: String,
    pub previous: String,
    pub digest: String,
    pub base_layers: LayerRange,
    pub app_layers: usize,
}

// STUB: replaced by wip/rio at merge
#[derive(Debug, Clone, Serialize)]
pub struct LayerRange {
    pub from: usize,
    pub to: usize,
}

// STUB: replaced by wip/rio at merge
#[derive(Debug, Clone, Default, Serialize)]
pub struct BlobCounts {
    pub present: usize,
    pub mounted: usize,
    pub copied: usize,
    pub bytes_copied: u64,
}

/// Why a rebase is refused (the core's `Refusal` at merge).
// STUB: replaced by wip/rio at merge
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

// STUB: replaced by wip/rio at merge
#[derive(Debug, thiserror::Error)]
pub enum RebaseError {
    /// Unsafe to rebase: nothing was written.
    #[error("rebase refused: {0}")]
    Refused(Refusal),
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// Rebases `request.image` onto `request.run_image`.
// STUB: replaced by wip/rio at merge
pub async fn rebase(registry: &Registry, request: &RebaseRequest) -> Result<RebaseReport, RebaseError> {
    let _ = registry;
    Err(RebaseError::Registry(RegistryError::Setup {
        registry: request.image.registry().to_string(),
        detail: "registry rebase is not built into this version (stub)".into(),
    }))
}

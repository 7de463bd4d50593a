//! Registry writes: blob checks, mounts and uploads, and manifest PUTs, with push-scoped tokens.
// STUB: replaced by wip/rio at merge

use builder_monitor_core::reference::ImageRef;

use super::{Registry, RegistryError};

impl Registry {
    /// PUT a manifest under `reference` (digest or tag); returns its digest.
    // STUB: replaced by wip/rio at merge
    pub async fn put_manifest(
        &self,
        image: &ImageRef,
        reference: &str,
        media_type: &str,
        bytes: bytes::Bytes,
    ) -> Result<String, RegistryError> {
        let _ = (reference, media_type, bytes);
        Err(RegistryError::Setup {
            registry: image.registry().to_string(),
            detail: "manifest PUT is not built into this version (stub)".into(),
        })
    }
}

//! What an attestation says was done: an SLSA provenance v1 predicate for a digest
//! builder-monitor wrote (a rebase, a rebuild, a rollback), naming what it came from, and the
//! OpenVEX document of what it fixes when it claims a fix (built by the caller). Built from the
//! action's facts only, with no clock, so a retry attests the same bytes.

use serde_json::{Value, json};

use crate::reference::is_sha256_digest;

/// SLSA provenance v1's predicate type.
pub const SLSA_PROVENANCE_V1: &str = "https://slsa.dev/provenance/v1";
/// An OpenVEX document's predicate type: the namespace without its version, what `cosign attest
/// --type openvex` writes and `cosign verify-attestation --type openvex` matches exactly (cosign's
/// `OpenVexNamespace`); Trivy accepts it and the versioned form alike, vexctl only this one.
pub const OPENVEX_PREDICATE_TYPE: &str = "https://openvex.dev/ns";

/// What made a digest, as an attestation records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// `rebase`, `rebuild`, `rollback` or `build`.
    pub kind: String,
    /// The app image's tag as named (`registry/repository:tag`).
    pub image: String,
    /// The app digest it came from (a rebase's app image, a rollback's digest before).
    pub from: Option<String>,
    /// The run image it is on, pinned (`registry/repository@sha256:…`).
    pub run_image: Option<String>,
    /// The builder pin of a rebuild (`registry/repository@sha256:…`).
    pub builder: Option<String>,
    /// The change and the action that did it.
    pub change: Option<String>,
    pub action: Option<String>,
    /// builder-monitor's version.
    pub version: String,
    /// What the write fixes, as an OpenVEX document (`vulns::openvex`), attested beside the
    /// provenance with predicate type [`OPENVEX_PREDICATE_TYPE`]; none when it claims no fix.
    pub openvex: Option<Value>,
}

impl Provenance {
    /// The `buildType` of this kind of action.
    pub fn build_type(&self) -> String {
        format!("urn:builder-monitor:{}:v1", self.kind)
    }

    /// The predicate (`buildDefinition`, `runDetails`).
    pub fn predicate(&self) -> Value {
        let mut external = serde_json::Map::new();
        external.insert("kind".into(), self.kind.clone().into());
        external.insert("image".into(), self.image.clone().into());
        if let Some(run) = &self.run_image {
            external.insert("runImage".into(), run.clone().into());
        }
        let mut internal = serde_json::Map::new();
        if let Some(change) = &self.change {
            internal.insert("change".into(), change.clone().into());
        }
        let repository = self.image.rsplit_once(':').filter(|(r, t)| !t.contains('/') && !r.is_empty());
        let repository = repository.map_or(self.image.as_str(), |(r, _)| r);
        let mut dependencies = Vec::new();
        let mut depend = |name: &str, reference: String, digest: &str| {
            if let Some(hex) = digest.strip_prefix("sha256:").filter(|_| is_sha256_digest(digest)) {
                dependencies
                    .push(json!({"name": name, "uri": format!("oci://{reference}"), "digest": {"sha256": hex}}));
            }
        };
        if let Some(from) = &self.from {
            depend("app", format!("{repository}@{from}"), from);
        }
        for (name, pinned) in [("runImage", &self.run_image), ("builder", &self.builder)] {
            if let Some((_, digest)) = pinned.as_deref().and_then(|p| p.rsplit_once('@')) {
                depend(name, pinned.clone().unwrap_or_default(), digest);
            }
        }
        let mut metadata = serde_json::Map::new();
        if let Some(action) = &self.action {
            metadata.insert("invocationId".into(), action.clone().into());
        }
        json!({
            "buildDefinition": {
                "buildType": self.build_type(),
                "externalParameters": external,
                "internalParameters": internal,
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {"id": "urn:builder-monitor", "version": {"builder-monitor": self.version}},
                "metadata": metadata,
            },
        })
    }
}

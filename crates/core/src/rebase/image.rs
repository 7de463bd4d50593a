//! Reading the two images' documents: manifests and configs parsed and checked against each other,
//! media types told apart, labels and env read. Everything the decisions need, nothing decided.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use super::{Blob, Refusal, malformed};

pub(super) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(super) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(super) const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub(super) const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub(super) const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";

/// Layer media types with the same bytes under both schemes: (Docker v2, OCI).
const LAYER_TYPE_PAIRS: [(&str, &str); 3] = [
    ("application/vnd.docker.image.rootfs.diff.tar.gzip", "application/vnd.oci.image.layer.v1.tar+gzip"),
    (
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    ),
    ("application/vnd.docker.image.rootfs.diff.tar", "application/vnd.oci.image.layer.v1.tar"),
];

/// `sha256:<hex>` of exactly these bytes.
pub(super) fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

pub(super) fn parse_object(bytes: &[u8], what: &'static str) -> Result<Map<String, Value>, Refusal> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => malformed(what, "not a JSON object"),
        Err(e) => malformed(what, format!("not JSON ({e})")),
    }
}

pub(super) fn compact(value: &Map<String, Value>) -> Vec<u8> {
    // Serialising a map of JSON values cannot fail (string keys, no foreign types).
    serde_json::to_vec(value).unwrap_or_default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ManifestKind {
    Oci,
    Docker,
}

impl ManifestKind {
    fn name(self) -> &'static str {
        match self {
            ManifestKind::Oci => "OCI",
            ManifestKind::Docker => "Docker v2",
        }
    }

    /// The same layer bytes under this scheme's media type.
    pub(super) fn layer_media_type(self, media_type: &str) -> Result<String, Refusal> {
        let (own_prefix, converted) = match self {
            ManifestKind::Oci => {
                ("application/vnd.oci.", LAYER_TYPE_PAIRS.iter().find(|(d, _)| *d == media_type).map(|(_, o)| *o))
            }
            ManifestKind::Docker => {
                ("application/vnd.docker.", LAYER_TYPE_PAIRS.iter().find(|(_, o)| *o == media_type).map(|(d, _)| *d))
            }
        };
        if media_type.starts_with(own_prefix) {
            return Ok(media_type.to_string());
        }
        converted
            .map(str::to_string)
            .ok_or_else(|| Refusal::LayerMediaType { media_type: media_type.to_string(), manifest: self.name() })
    }
}

/// Which image a document belongs to, for messages.
#[derive(Clone, Copy)]
pub(super) enum Side {
    App,
    RunImage,
}

impl Side {
    pub(super) fn manifest(self) -> &'static str {
        match self {
            Side::App => "app manifest",
            Side::RunImage => "run image manifest",
        }
    }
    pub(super) fn config(self) -> &'static str {
        match self {
            Side::App => "app config",
            Side::RunImage => "run image config",
        }
    }
    pub(super) fn image(self) -> &'static str {
        match self {
            Side::App => "app image",
            Side::RunImage => "run image",
        }
    }
}

/// A single-platform image as read: its manifest and config documents, layer descriptors and diffIDs.
pub(super) struct ImageDoc {
    pub(super) manifest: Map<String, Value>,
    pub(super) config: Map<String, Value>,
    pub(super) kind: ManifestKind,
    pub(super) media_type: String,
    pub(super) layers: Vec<Map<String, Value>>,
    pub(super) diff_ids: Vec<String>,
}

pub(super) fn read_image(manifest_bytes: &[u8], config_bytes: &[u8], side: Side) -> Result<ImageDoc, Refusal> {
    let what = side.manifest();
    let manifest = parse_object(manifest_bytes, what)?;
    let config = parse_object(config_bytes, side.config())?;
    if manifest.get("schemaVersion").and_then(Value::as_u64) != Some(2) {
        return malformed(what, "schemaVersion is not 2");
    }
    let declared = manifest.get("mediaType").and_then(Value::as_str);
    if declared == Some(OCI_INDEX) || declared == Some(DOCKER_LIST) || manifest.contains_key("manifests") {
        return malformed(what, "an index, not a single-platform manifest");
    }
    let config_descriptor = match manifest.get("config") {
        Some(Value::Object(d)) => d,
        _ => return malformed(what, "no config descriptor"),
    };
    let (kind, media_type) = match manifest.get("mediaType") {
        Some(Value::String(t)) if t == OCI_MANIFEST => (ManifestKind::Oci, t.clone()),
        Some(Value::String(t)) if t == DOCKER_MANIFEST => (ManifestKind::Docker, t.clone()),
        Some(Value::String(t)) => return malformed(what, format!("unsupported media type {t}")),
        // OCI makes the field optional; Docker v2 always sets it.
        None | Some(Value::Null) => {
            if config_descriptor.get("mediaType").and_then(Value::as_str) == Some(DOCKER_CONFIG) {
                (ManifestKind::Docker, DOCKER_MANIFEST.to_string())
            } else {
                (ManifestKind::Oci, OCI_MANIFEST.to_string())
            }
        }
        Some(_) => return malformed(what, "mediaType is not a string"),
    };
    let named = config_descriptor.get("digest").and_then(Value::as_str).unwrap_or_default();
    let actual = digest_of(config_bytes);
    if named != actual {
        return malformed(what, format!("its config descriptor names {named:?}, not the config given ({actual})"));
    }
    let layers: Vec<Map<String, Value>> = match manifest.get("layers") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::Object(d) => blob(d, what).map(|_| d.clone()),
                _ => malformed(what, "a layer descriptor is not an object"),
            })
            .collect::<Result<_, _>>()?,
        None | Some(Value::Null) => Vec::new(),
        Some(_) => return malformed(what, "layers is not an array"),
    };
    let diff_ids: Vec<String> = match config.get("rootfs").and_then(|r| r.get("diff_ids")) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|d| d.as_str().map(str::to_string).ok_or(()))
            .collect::<Result<_, _>>()
            .or_else(|()| malformed(side.config(), "a rootfs.diff_ids entry is not a string"))?,
        None | Some(Value::Null) => Vec::new(),
        Some(_) => return malformed(side.config(), "rootfs.diff_ids is not an array"),
    };
    if layers.len() != diff_ids.len() {
        return malformed(what, format!("{} layers, but its config has {} diffIDs", layers.len(), diff_ids.len()));
    }
    Ok(ImageDoc { manifest, config, kind, media_type, layers, diff_ids })
}

pub(super) fn blob(descriptor: &Map<String, Value>, what: &'static str) -> Result<Blob, Refusal> {
    let digest = descriptor.get("digest").and_then(Value::as_str);
    let size = descriptor.get("size").and_then(Value::as_u64);
    let media_type = descriptor.get("mediaType").and_then(Value::as_str);
    match (digest, size, media_type) {
        (Some(digest), Some(size), Some(media_type)) => {
            Ok(Blob { digest: digest.to_string(), size, media_type: media_type.to_string() })
        }
        _ => malformed(what, "a layer descriptor lacks a digest, size or mediaType"),
    }
}

/// The config's `config` object (Env, Labels…), if any.
fn container_config(config: &Map<String, Value>, side: Side) -> Result<Option<&Map<String, Value>>, Refusal> {
    match config.get("config") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(c)) => Ok(Some(c)),
        Some(_) => malformed(side.config(), "config is not an object"),
    }
}

pub(super) fn labels(config: &Map<String, Value>, side: Side) -> Result<BTreeMap<String, String>, Refusal> {
    let Some(container) = container_config(config, side)? else { return Ok(BTreeMap::new()) };
    match container.get("Labels") {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => malformed(side.config(), format!("label {k} is not a string")),
            })
            .collect(),
        Some(_) => malformed(side.config(), "Labels is not an object"),
    }
}

pub(super) fn env_value(config: &Map<String, Value>, side: Side, name: &str) -> Result<Option<String>, Refusal> {
    let Some(container) = container_config(config, side)? else { return Ok(None) };
    let Some(env) = container.get("Env").and_then(Value::as_array) else { return Ok(None) };
    Ok(env
        .iter()
        .filter_map(Value::as_str)
        .find_map(|e| e.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')).map(str::to_string)))
}

pub(super) fn object_mut<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = map.entry(key.to_string()).or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(inner) => inner,
        _ => unreachable!("just made an object"),
    }
}

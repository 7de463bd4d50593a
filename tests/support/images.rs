//! Synthetic images pushed to a test registry with oci-client: single OCI or Docker v2 manifests
//! and multi-platform indexes, with any config labels.

use std::collections::BTreeMap;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use reqwest::header::HeaderValue;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::fixture;

pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Oci,
    Docker,
}

impl Format {
    pub fn manifest(self) -> &'static str {
        match self {
            Format::Oci => "application/vnd.oci.image.manifest.v1+json",
            Format::Docker => "application/vnd.docker.distribution.manifest.v2+json",
        }
    }
    pub fn index(self) -> &'static str {
        match self {
            Format::Oci => "application/vnd.oci.image.index.v1+json",
            Format::Docker => "application/vnd.docker.distribution.manifest.list.v2+json",
        }
    }
    pub fn config(self) -> &'static str {
        match self {
            Format::Oci => "application/vnd.oci.image.config.v1+json",
            Format::Docker => "application/vnd.docker.container.image.v1+json",
        }
    }
    pub fn layer(self) -> &'static str {
        match self {
            Format::Oci => "application/vnd.oci.image.layer.v1.tar+gzip",
            Format::Docker => "application/vnd.docker.image.rootfs.diff.tar.gzip",
        }
    }
}

/// One platform image: its config labels and env, and a salt that changes its digest.
#[derive(Debug, Clone)]
pub struct Image {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub env: Vec<String>,
    pub salt: String,
    /// `rootfs.diff_ids` to write instead of the one real layer's (the registry does not check).
    pub diff_ids: Option<Vec<String>>,
}

impl Image {
    pub fn new(architecture: &str) -> Self {
        Image {
            os: "linux".into(),
            architecture: architecture.into(),
            variant: None,
            labels: BTreeMap::new(),
            env: vec!["PATH=/usr/local/bin:/usr/bin:/bin".into()],
            salt: "0".into(),
            diff_ids: None,
        }
    }

    pub fn salt(mut self, salt: &str) -> Self {
        self.salt = salt.into();
        self
    }

    pub fn label(mut self, key: &str, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    pub fn env(mut self, entry: &str) -> Self {
        self.env.push(entry.into());
        self
    }

    pub fn platform(&self) -> String {
        match &self.variant {
            Some(v) => format!("{}/{}/{v}", self.os, self.architecture),
            None => format!("{}/{}", self.os, self.architecture),
        }
    }
}

/// What a push produced.
#[derive(Debug, Clone)]
pub struct Pushed {
    pub digest: String,
    pub media_type: String,
    pub size: usize,
    pub config_digest: String,
}

pub struct Pusher {
    client: Client,
    auth: RegistryAuth,
    host: String,
}

impl Pusher {
    pub fn new(host: &str) -> Self {
        Self::with_auth(host, RegistryAuth::Anonymous)
    }

    pub fn with_basic(host: &str, user: &str, password: &str) -> Self {
        Self::with_auth(host, RegistryAuth::Basic(user.into(), password.into()))
    }

    fn with_auth(host: &str, auth: RegistryAuth) -> Self {
        builder_monitor::install_crypto_provider();
        let config = ClientConfig { protocol: ClientProtocol::Http, ..Default::default() };
        let client = Client::try_from(config).expect("oci client");
        Pusher { client, auth, host: host.into() }
    }

    fn reference(&self, repo: &str, tag_or_digest: &str) -> Reference {
        let sep = if tag_or_digest.starts_with("sha256:") { "@" } else { ":" };
        format!("{}/{repo}{sep}{tag_or_digest}", self.host).parse().expect("reference")
    }

    async fn login(&self, reference: &Reference) {
        self.client.auth(reference, &self.auth, RegistryOperation::Push).await.expect("registry auth for push");
    }

    async fn blob(&self, reference: &Reference, bytes: Vec<u8>) -> String {
        let digest = sha256(&bytes);
        self.client.push_blob(reference, bytes, &digest).await.expect("push blob");
        digest
    }

    /// Pushes one image manifest, tagged when `tag` is given (else by digest only).
    pub async fn push_image(&self, repo: &str, tag: Option<&str>, image: &Image, format: Format) -> Pushed {
        let layer = std::fs::read(fixture("layer.tar.gz")).expect("layer fixture");
        let diff_ids = image
            .diff_ids
            .clone()
            .unwrap_or_else(|| vec![sha256(&std::fs::read(fixture("layer.tar")).expect("layer tar fixture"))]);
        let mut labels = image.labels.clone();
        labels.insert("org.opencontainers.image.revision".into(), image.salt.clone());
        let mut config = json!({
            "created": "2024-01-01T00:00:00Z",
            "architecture": image.architecture,
            "os": image.os,
            "config": { "Env": image.env, "Cmd": ["/bin/true"], "Labels": labels },
            "rootfs": { "type": "layers", "diff_ids": diff_ids },
            "history": [{ "created": "2024-01-01T00:00:00Z", "created_by": "builder-monitor tests" }],
        });
        if let Some(v) = &image.variant {
            config["variant"] = json!(v);
        }
        let config = serde_json::to_vec(&config).unwrap();
        let target = self.reference(repo, tag.unwrap_or("staging"));
        self.login(&target).await;
        let (config_len, layer_len) = (config.len(), layer.len());
        let config_digest = self.blob(&target, config).await;
        let layer_digest = self.blob(&target, layer).await;
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": format.manifest(),
            "config": { "mediaType": format.config(), "digest": config_digest, "size": config_len },
            "layers": [{ "mediaType": format.layer(), "digest": layer_digest, "size": layer_len }],
        });
        let bytes = serde_json::to_vec(&manifest).unwrap();
        let digest = sha256(&bytes);
        let target = self.reference(repo, tag.unwrap_or(&digest));
        self.client
            .push_manifest_raw(&target, bytes.clone(), HeaderValue::from_static(format.manifest()))
            .await
            .expect("push manifest");
        Pushed { digest, media_type: format.manifest().into(), size: bytes.len(), config_digest }
    }

    /// Pushes each platform image by digest, then an index naming them under `tag`.
    pub async fn push_index(&self, repo: &str, tag: &str, images: &[Image], format: Format) -> (Pushed, Vec<Pushed>) {
        let mut children = Vec::new();
        let mut entries = Vec::new();
        for image in images {
            let child = self.push_image(repo, None, image, format).await;
            let mut platform = json!({ "os": image.os, "architecture": image.architecture });
            if let Some(v) = &image.variant {
                platform["variant"] = json!(v);
            }
            entries.push(json!({
                "mediaType": child.media_type, "digest": child.digest, "size": child.size, "platform": platform,
            }));
            children.push(child);
        }
        let index = json!({ "schemaVersion": 2, "mediaType": format.index(), "manifests": entries });
        let bytes = serde_json::to_vec(&index).unwrap();
        let digest = sha256(&bytes);
        let target = self.reference(repo, tag);
        self.login(&target).await;
        self.client
            .push_manifest_raw(&target, bytes.clone(), HeaderValue::from_static(format.index()))
            .await
            .expect("push index");
        (
            Pushed { digest, media_type: format.index().into(), size: bytes.len(), config_digest: String::new() },
            children,
        )
    }

    /// Pushes `blobs` and then `manifest` (of `media_type`) under `reference` (a tag or digest).
    pub async fn push_raw(
        &self,
        repo: &str,
        reference: &str,
        blobs: Vec<Vec<u8>>,
        manifest: Vec<u8>,
        media_type: &'static str,
    ) {
        let target = self.reference(repo, reference);
        self.login(&target).await;
        for blob in blobs {
            self.blob(&target, blob).await;
        }
        self.client
            .push_manifest_raw(&target, manifest, HeaderValue::from_static(media_type))
            .await
            .expect("push manifest");
    }

    /// Deletes a manifest by digest (the tag pointing at it disappears with it).
    pub async fn delete(&self, repo: &str, digest: &str) {
        let url = format!("http://{}/v2/{repo}/manifests/{digest}", self.host);
        let mut request = super::http().delete(url);
        if let RegistryAuth::Basic(user, password) = &self.auth {
            request = request.basic_auth(user, Some(password));
        }
        let status = request.send().await.expect("delete manifest").status();
        assert_eq!(status.as_u16(), 202, "delete {repo}@{digest}");
    }
}

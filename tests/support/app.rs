//! Layered CNB images for rebase tests: run images with several real gzip tar layers (diffIDs the
//! sha256 of each uncompressed tar) and stack/base labels, and app images built on them with the
//! labels, env and history the lifecycle's exporter writes.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::images::{Format, Pusher, sha256};

/// One layer: the gzip blob pushed and the diffID of its tar.
#[derive(Debug, Clone)]
pub struct Layer {
    pub blob: Vec<u8>,
    pub digest: String,
    pub diff_id: String,
    pub created_by: String,
}

/// A tar holding one file `path` with `content` (ustar, mtime 0: the same bytes every time).
pub fn tar(path: &str, content: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    let put = |header: &mut [u8; 512], at: usize, field: &[u8]| header[at..at + field.len()].copy_from_slice(field);
    put(&mut header, 0, path.as_bytes());
    put(&mut header, 100, b"0000644\0");
    put(&mut header, 108, b"0000000\0");
    put(&mut header, 116, b"0000000\0");
    put(&mut header, 124, format!("{:011o}\0", content.len()).as_bytes());
    put(&mut header, 136, b"00000000000\0");
    put(&mut header, 148, b"        ");
    header[156] = b'0';
    put(&mut header, 257, b"ustar\0");
    put(&mut header, 263, b"00");
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    put(&mut header, 148, format!("{sum:06o}\0 ").as_bytes());
    let mut out = header.to_vec();
    out.extend_from_slice(content);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// `gzip -n` of `bytes` (the system's gzip: real compressed layers, no name or time in the header).
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut child = Command::new("gzip")
        .args(["-n", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip is installed");
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("gzip output");
    writer.join().unwrap().expect("write to gzip");
    assert!(output.status.success(), "gzip failed");
    output.stdout
}

pub fn layer(path: &str, content: &str) -> Layer {
    let tar = tar(path, content.as_bytes());
    let blob = gzip(&tar);
    Layer { digest: sha256(&blob), diff_id: sha256(&tar), blob, created_by: format!("ADD {path}") }
}

fn run_layers(version: &str, architecture: &str, n: usize) -> Vec<Layer> {
    (0..n)
        .map(|i| layer(&format!("etc/run-{i}"), &format!("run image {version} for {architecture}, layer {i}\n")))
        .collect()
}

/// A run image for one platform.
#[derive(Debug, Clone)]
pub struct RunImage {
    pub version: String,
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
    pub layers: Vec<Layer>,
    pub labels: BTreeMap<String, String>,
}

impl RunImage {
    /// `n` layers whose content says `version`; jammy stack id, mixins, base distro labels.
    pub fn jammy(version: &str, n: usize) -> Self {
        let layers = run_layers(version, "amd64", n);
        let labels = [
            ("io.buildpacks.stack.id", "io.buildpacks.stacks.jammy".to_string()),
            ("io.buildpacks.stack.mixins", r#"["ca-certificates","run:tzdata","libssl3"]"#.to_string()),
            ("io.buildpacks.stack.maintainer", format!("run image team {version}")),
            ("io.buildpacks.stack.distro.name", "ubuntu".to_string()),
            ("io.buildpacks.base.id", "io.buildpacks.stacks.jammy".to_string()),
            ("io.buildpacks.base.distro.name", "ubuntu".to_string()),
            ("io.buildpacks.base.distro.version", "22.04".to_string()),
            ("org.opencontainers.image.version", version.to_string()),
        ];
        RunImage {
            version: version.into(),
            os: "linux".into(),
            architecture: "amd64".into(),
            variant: None,
            layers,
            labels: labels.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        }
    }

    pub fn arch(mut self, architecture: &str, variant: Option<&str>) -> Self {
        self.architecture = architecture.into();
        self.variant = variant.map(str::to_string);
        // Other bytes per architecture, as real images have.
        self.layers = run_layers(&self.version, architecture, self.layers.len());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    pub fn top_diff_id(&self) -> String {
        self.layers.last().unwrap().diff_id.clone()
    }

    pub fn config(&self) -> Value {
        let mut config = json!({
            "created": "2024-01-01T00:00:00Z",
            "architecture": self.architecture,
            "os": self.os,
            "config": {
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "User": "1002:1000",
                "Labels": self.labels,
            },
            "rootfs": { "type": "layers", "diff_ids": self.layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>() },
            "history": self.layers.iter().map(|l| json!({"created": "2024-01-01T00:00:00Z", "created_by": l.created_by})).collect::<Vec<_>>(),
        });
        if let Some(v) = &self.variant {
            config["variant"] = json!(v);
        }
        config
    }
}

/// An app built on a run image by the lifecycle: the run image's layers, then launcher, buildpack
/// and app layers; labels and env as the exporter writes them.
#[derive(Debug, Clone)]
pub struct App {
    pub run: RunImage,
    pub layers: Vec<Layer>,
    pub platform_api: Option<String>,
    /// `runImage.image` and mirrors in the lifecycle metadata.
    pub run_image_name: String,
    pub mirrors: Vec<String>,
    /// `runImage.reference`.
    pub run_image_reference: String,
    pub labels: BTreeMap<String, String>,
    /// Drop `io.buildpacks.lifecycle.metadata` entirely.
    pub no_metadata: bool,
    /// Write this `runImage.topLayer` instead of the run image's top diffID.
    pub top_layer: Option<String>,
}

impl App {
    pub fn on(run: &RunImage, run_image_name: &str, run_image_reference: &str) -> Self {
        let arch = run.architecture.clone();
        let layers = vec![
            layer("cnb/lifecycle/launcher", &format!("launcher for {arch}\n")),
            layer("layers/paketo-buildpacks_node-engine/node/bin/node", &format!("node 20 for {arch}\n")),
            layer("workspace/server.js", &format!("require('http').createServer().listen(8080) // {arch}\n")),
            layer("layers/config/metadata.toml", "[[processes]]\ntype = \"web\"\n"),
        ];
        let mut labels = BTreeMap::new();
        for (k, v) in &run.labels {
            if k.starts_with("io.buildpacks.stack.") || k.starts_with("io.buildpacks.base.") {
                labels.insert(k.clone(), v.clone());
            }
        }
        labels.insert(
            "io.buildpacks.build.metadata".into(),
            json!({"processes": [{"type": "web", "command": ["node"], "args": ["server.js"], "direct": true, "buildpackID": "paketo-buildpacks/npm-start"}],
                   "buildpacks": [{"id": "paketo-buildpacks/node-engine", "version": "3.2.1"}],
                   "launcher": {"version": "0.20.5"}})
            .to_string(),
        );
        labels.insert(
            "io.buildpacks.project.metadata".into(),
            json!({"source": {"type": "git", "version": {"commit": "abc123"}}}).to_string(),
        );
        labels.insert("org.opencontainers.image.source".into(), "https://example.test/app".into());
        App {
            run: run.clone(),
            layers,
            platform_api: Some("0.12".into()),
            run_image_name: run_image_name.into(),
            mirrors: vec!["mirror.example.test/run:latest".into()],
            run_image_reference: run_image_reference.into(),
            labels,
            no_metadata: false,
            top_layer: None,
        }
    }

    pub fn platform_api(mut self, api: Option<&str>) -> Self {
        self.platform_api = api.map(str::to_string);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    pub fn diff_ids(&self) -> Vec<String> {
        self.run.layers.iter().chain(&self.layers).map(|l| l.diff_id.clone()).collect()
    }

    pub fn lifecycle_metadata(&self) -> Value {
        let sha = |i: usize| json!({"sha": self.layers[i].diff_id});
        json!({
            "app": [sha(2)],
            "config": sha(3),
            "launcher": sha(0),
            "buildpacks": [{"key": "paketo-buildpacks/node-engine", "version": "3.2.1",
                            "layers": {"node": {"sha": self.layers[1].diff_id, "data": {}, "build": false, "launch": true, "cache": false}}}],
            "runImage": {
                "topLayer": self.top_layer.clone().unwrap_or_else(|| self.run.top_diff_id()),
                "reference": self.run_image_reference,
                "image": self.run_image_name,
                "mirrors": self.mirrors,
            },
            "stack": {"runImage": {"image": self.run_image_name, "mirrors": self.mirrors}},
        })
    }

    pub fn config(&self) -> Value {
        let mut config = self.run.config();
        let mut labels = self.labels.clone();
        if !self.no_metadata {
            labels.insert("io.buildpacks.lifecycle.metadata".into(), self.lifecycle_metadata().to_string());
        }
        let mut env = vec![
            "PATH=/cnb/process:/cnb/lifecycle:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
            "CNB_LAYERS_DIR=/layers".into(),
            "CNB_APP_DIR=/workspace".into(),
        ];
        if let Some(api) = &self.platform_api {
            env.push(format!("CNB_PLATFORM_API={api}"));
        }
        config["created"] = json!("1980-01-01T00:00:01Z");
        config["config"] = json!({
            "Env": env, "Entrypoint": ["/cnb/process/web"], "User": "1002:1000",
            "WorkingDir": "/workspace", "Labels": labels,
        });
        config["rootfs"]["diff_ids"] = json!(self.diff_ids());
        let history = config["history"].as_array_mut().unwrap();
        for l in &self.layers {
            history.push(json!({"created": "1980-01-01T00:00:01Z", "created_by": format!("Buildpacks Application Launcher: {}", l.created_by)}));
            if l.created_by.contains("node") {
                // The exporter records empty layers too; they are not layers.
                history.push(json!({"created": "1980-01-01T00:00:01Z", "created_by": "Buildpacks: set env", "empty_layer": true}));
            }
        }
        config
    }
}

/// What was pushed: the manifest's digest, media type and size, and the config digest.
#[derive(Debug, Clone)]
pub struct PushedImage {
    pub digest: String,
    pub media_type: String,
    pub size: usize,
    pub config: Value,
}

/// An image as `push` sends it: its blobs (the layers, then the config) and its manifest.
pub struct Built {
    pub blobs: Vec<Vec<u8>>,
    pub manifest: Vec<u8>,
    pub digest: String,
}

/// The manifest and blobs of an image of `layers` and `config`, titled `repo`.
pub fn build(repo: &str, layers: &[&Layer], config: &Value, format: Format) -> Built {
    let config_bytes = serde_json::to_vec(config).unwrap();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": format.manifest(),
        "config": { "mediaType": format.config(), "digest": sha256(&config_bytes), "size": config_bytes.len() },
        "layers": layers.iter().map(|l| json!({"mediaType": format.layer(), "digest": l.digest, "size": l.blob.len()})).collect::<Vec<_>>(),
        "annotations": { "org.opencontainers.image.title": repo },
    });
    let manifest = serde_json::to_vec(&manifest).unwrap();
    let digest = sha256(&manifest);
    let mut blobs: Vec<Vec<u8>> = layers.iter().map(|l| l.blob.clone()).collect();
    blobs.push(config_bytes);
    Built { blobs, manifest, digest }
}

/// Pushes layers, config and manifest; tagged when `tag` is given, else by digest.
pub async fn push(
    pusher: &Pusher,
    repo: &str,
    tag: Option<&str>,
    layers: &[&Layer],
    config: &Value,
    format: Format,
) -> PushedImage {
    let Built { blobs, manifest, digest } = build(repo, layers, config, format);
    let size = manifest.len();
    pusher.push_raw(repo, tag.unwrap_or(&digest), blobs, manifest, format.manifest()).await;
    PushedImage { digest, media_type: format.manifest().into(), size, config: config.clone() }
}

pub async fn push_run(pusher: &Pusher, repo: &str, tag: Option<&str>, run: &RunImage, format: Format) -> PushedImage {
    let layers: Vec<&Layer> = run.layers.iter().collect();
    push(pusher, repo, tag, &layers, &run.config(), format).await
}

pub async fn push_app(pusher: &Pusher, repo: &str, tag: Option<&str>, app: &App, format: Format) -> PushedImage {
    let layers: Vec<&Layer> = app.run.layers.iter().chain(&app.layers).collect();
    push(pusher, repo, tag, &layers, &app.config(), format).await
}

/// An index of `children` (each with its platform), plus an attestation-like entry and annotations
/// a rebase must keep.
pub async fn push_index(
    pusher: &Pusher,
    repo: &str,
    tag: &str,
    children: &[(&PushedImage, &RunImage)],
    extra: Option<&PushedImage>,
    format: Format,
) -> (String, Value) {
    let mut entries: Vec<Value> = children
        .iter()
        .map(|(p, run)| {
            let mut platform = json!({"os": run.os, "architecture": run.architecture});
            if let Some(v) = &run.variant {
                platform["variant"] = json!(v);
            }
            json!({"mediaType": p.media_type, "digest": p.digest, "size": p.size, "platform": platform})
        })
        .collect();
    if let Some(extra) = extra {
        entries.push(json!({"mediaType": extra.media_type, "digest": extra.digest, "size": extra.size,
            "platform": {"os": "unknown", "architecture": "unknown"},
            "annotations": {"vnd.docker.reference.type": "attestation-manifest", "vnd.docker.reference.digest": children[0].0.digest}}));
    }
    let index = json!({"schemaVersion": 2, "mediaType": format.index(), "manifests": entries,
        "annotations": {"org.opencontainers.image.ref.name": tag, "com.example.team": "payments"}});
    let bytes = serde_json::to_vec(&index).unwrap();
    pusher.push_raw(repo, tag, Vec::new(), bytes.clone(), format.index()).await;
    (sha256(&bytes), index)
}

/// Two run images (amd64, arm64/v8) of `version` with `layers` layers each.
pub fn two_platform_runs(version: &str, layers: usize) -> [RunImage; 2] {
    [RunImage::jammy(version, layers), RunImage::jammy(version, layers).arch("arm64", Some("v8"))]
}

/// Pushes each of `runs` by digest to `repo` and an index of them under `tag`; each child as pushed.
pub async fn push_run_index(pusher: &Pusher, repo: &str, tag: &str, runs: &[RunImage]) -> Vec<PushedImage> {
    let mut children = Vec::new();
    for run in runs {
        children.push(push_run(pusher, repo, None, run, Format::Oci).await);
    }
    let pairs: Vec<(&PushedImage, &RunImage)> = children.iter().zip(runs.iter()).collect();
    push_index(pusher, repo, tag, &pairs, None, Format::Oci).await;
    children
}

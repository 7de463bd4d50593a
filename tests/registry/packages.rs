//! Which OS packages a base-image move changed, against a real registry: run images listing their
//! packages in the Paketo label or in an SBOM layer (each format), two-platform run images, and the
//! broken cases (a note, the move still reported, no false change).

use crate::support;

use std::sync::Arc;

use builder_monitor::alert::Dispatcher;
use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::Ledger;
use builder_monitor::monitor::Monitor;
use builder_monitor::schedule::Clock;
use builder_monitor::server::{self, ServerState};
use builder_monitor_core::event::{Event, EventType};
use serde_json::{Value, json};
use support::app::{Layer, RunImage, gzip, push_index, push_run, tar};
use support::cnb::BuilderSpec;
use support::daemon::Workspace;
use support::images::{Format, Pusher, sha256};
use support::proxy::Proxy;
use support::receiver::Receiver;
use support::registry::TestRegistry;
use tokio_util::sync::CancellationToken;

const REPO: &str = "paketo/run-jammy-base";

/// (name, version) of the first run image; the second upgrades openssl, adds libnew2, drops libgone1.
const V1: &[(&str, &str)] = &[
    ("libgone1", "1.0-1"),
    ("libssl3", "3.0.2-0ubuntu1.15"),
    ("openssl", "3.0.2-0ubuntu1.15"),
    ("tzdata", "2024a-0ubuntu0.22.04"),
];
const V2: &[(&str, &str)] = &[
    ("libnew2", "2.1-1"),
    ("libssl3", "3.0.2-0ubuntu1.15"),
    ("openssl", "3.0.2-0ubuntu1.16"),
    ("tzdata", "2024a-0ubuntu0.22.04"),
];

fn expected_diff(source: &str) -> Value {
    json!({"source": source,
           "changed": [{"name": "openssl", "from": "3.0.2-0ubuntu1.15", "to": "3.0.2-0ubuntu1.16"}],
           "added": [{"name": "libnew2", "version": "2.1-1"}],
           "removed": [{"name": "libgone1", "version": "1.0-1"}]})
}

/// The Paketo label as `jam create-stack` writes it.
fn paketo_label(packages: &[(&str, &str)], arch: &str) -> String {
    let list: Vec<Value> = packages
        .iter()
        .map(|(name, version)| {
            json!({"name": name, "version": version, "arch": arch,
                   "source": {"name": name, "version": version, "upstreamVersion": version.split('-').next()},
                   "summary": format!("{name} for tests")})
        })
        .collect();
    serde_json::to_string(&list).unwrap()
}

/// An SBOM document of `ext`'s format (cdx, spdx, syft) listing `packages` as deb packages.
fn sbom(ext: &str, packages: &[(&str, &str)]) -> Vec<u8> {
    let purl = |n: &str, v: &str| format!("pkg:deb/ubuntu/{n}@{v}?arch=amd64&distro=ubuntu-22.04");
    let doc = match ext {
        "cdx" => json!({"bomFormat": "CycloneDX", "specVersion": "1.4",
            "components": packages.iter().map(|(n, v)| json!({"type": "library", "name": n, "version": v, "purl": purl(n, v)})).collect::<Vec<_>>()}),
        "spdx" => json!({"spdxVersion": "SPDX-2.3",
            "packages": packages.iter().map(|(n, v)| json!({"name": n, "versionInfo": v, "externalRefs": [
                {"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl", "referenceLocator": purl(n, v)}]})).collect::<Vec<_>>()}),
        _ => {
            json!({"artifacts": packages.iter().map(|(n, v)| json!({"name": n, "version": v, "type": "deb", "purl": purl(n, v)})).collect::<Vec<_>>(),
            "schema": {"version": "16.0.0"}})
        }
    };
    serde_json::to_vec(&doc).unwrap()
}

/// A gzip layer of `tar` bytes.
fn layer_of(tar: Vec<u8>, created_by: &str) -> Layer {
    let blob = gzip(&tar);
    Layer { digest: sha256(&blob), diff_id: sha256(&tar), blob, created_by: created_by.into() }
}

/// A run image whose last layer is `sbom_layer`, named by `io.buildpacks.base.sbom`.
fn with_sbom_layer(version: &str, sbom_layer: Layer) -> RunImage {
    let mut run = RunImage::jammy(version, 2);
    run.layers.push(sbom_layer);
    let top = run.top_diff_id();
    run.label("io.buildpacks.base.sbom", &top)
}

fn sbom_run(version: &str, ext: &str, packages: &[(&str, &str)]) -> RunImage {
    with_sbom_layer(version, layer_of(tar(&format!("cnb/sbom/bom.{ext}.json"), &sbom(ext, packages)), "SBOM"))
}

fn labelled(version: &str, packages: &[(&str, &str)]) -> RunImage {
    RunImage::jammy(version, 2).label("io.paketo.stack.packages", &paketo_label(packages, "amd64"))
}

struct Setup {
    monitor: Arc<Monitor>,
    dispatcher: Arc<Dispatcher>,
    ledger: Ledger,
    proxy: Proxy,
    pusher: Pusher,
    /// The run image the builder names (through the proxy).
    run: String,
    _registry: TestRegistry,
    _dir: tempfile::TempDir,
}

/// A registry, a builder naming the run image `REPO:latest` through a counting proxy, and a monitor
/// with `alerts` (TOML) that has pinned the builder and `first`.
async fn setup(first: &RunImage, alerts: &str) -> Setup {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let proxy = Proxy::start(&registry.host).await;
    let run = format!("{}/{REPO}:latest", proxy.host);
    push_run(&pusher, REPO, Some("latest"), first, Format::Oci).await;
    let builder = BuilderSpec::jammy(&run).image();
    pusher.push_image("paketo/builder", Some("latest"), &builder, Format::Oci).await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[monitor]\nstate = \"x.db\"\n[[builders]]\nname = \"base\"\nimage = \"{}/paketo/builder:latest\"\n{alerts}",
        registry.host
    );
    let config = Arc::new(Config::parse(&dir.path().join("config.toml"), &text).unwrap());
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let parts = Parts::new(config, ledger.clone(), Clock::System, None).unwrap();
    let (monitor, dispatcher) = (parts.monitor, parts.dispatcher);
    assert!(monitor.run_once().await);
    Setup { monitor, dispatcher, ledger, proxy, pusher, run, _registry: registry, _dir: dir }
}

impl Setup {
    /// Pushes `next` as the run image and checks; the `run_image.changed` it recorded.
    async fn move_to(&self, next: &RunImage) -> Event {
        push_run(&self.pusher, REPO, Some("latest"), next, Format::Oci).await;
        self.check().await
    }

    async fn check(&self) -> Event {
        self.last(EventType::RunImageChanged).await
    }

    /// Checks everything; the last event of `event_type`.
    async fn last(&self, event_type: EventType) -> Event {
        self.proxy.clear();
        assert!(self.monitor.run_once().await);
        let events = self.ledger.events_after(0, 1000).await.unwrap();
        events.into_iter().map(|e| e.event).rfind(|e| e.event_type == event_type).expect("an event")
    }

    async fn push_builder(&self, spec: &BuilderSpec) {
        self.pusher.push_image("paketo/builder", Some("latest"), &spec.image(), Format::Oci).await;
    }

    /// Blob GETs the last check made.
    fn blob_gets(&self) -> usize {
        self.proxy.seen().iter().filter(|r| r.method == "GET" && r.path.contains("/blobs/")).count()
    }
}

#[tokio::test]
async fn a_run_image_move_names_the_packages_its_label_says_moved() {
    let s = setup(&labelled("1", V1), "[server]\nlisten = \"127.0.0.1:0\"\n").await;
    let e = s.move_to(&labelled("2", V2)).await;
    let change = serde_json::to_value(e.change.as_ref().unwrap()).unwrap();
    assert_eq!(change["packages"], expected_diff("io.paketo.stack.packages"));
    // `status --json` and the API's changes endpoint carry it too.
    let status = builder_monitor::status::collect(s.monitor.config(), &s.ledger, 10).await.unwrap();
    let status = serde_json::to_value(&status).unwrap();
    assert_eq!(status["run_images"][0]["changes"][0]["packages"], expected_diff("io.paketo.stack.packages"));
    let changes = api_changes(&s).await;
    assert_eq!(changes[0]["id"], e.id.as_str());
    assert_eq!(changes[0]["change"]["packages"], expected_diff("io.paketo.stack.packages"));
    assert!(change.get("packages_note").is_none(), "{change}");
    assert!(
        e.summary()
            .ends_with("; openssl 3.0.2-0ubuntu1.15 → 3.0.2-0ubuntu1.16, libnew2 2.1-1 added, libgone1 1.0-1 removed"),
        "{}",
        e.summary()
    );
    // The label is in the config the check reads anyway: no blob beyond it.
    assert_eq!(s.blob_gets(), 1, "{:#?}", s.proxy.seen());
    // Each pin keeps its list, so the next move diffs against it without refetching the old side.
    let run = s.ledger.watch(&format!("run:{}/{REPO}:latest", s.proxy.host)).await.unwrap().unwrap();
    let kept = &serde_json::to_value(run.metadata.unwrap()).unwrap()["packages"]["linux/amd64"];
    assert_eq!(kept["source"], "io.paketo.stack.packages");
    assert_eq!(kept["packages"].as_array().unwrap().len(), 4);
    assert_eq!(kept["packages"][0], json!({"name": "libnew2", "arch": "amd64", "version": "2.1-1"}));
}

#[tokio::test]
async fn an_sbom_layer_in_each_format_gives_the_same_diff() {
    for (ext, source) in [("cdx", "sbom:cyclonedx"), ("spdx", "sbom:spdx"), ("syft", "sbom:syft")] {
        let s = setup(&sbom_run("1", ext, V1), "").await;
        let e = s.move_to(&sbom_run("2", ext, V2)).await;
        let change = serde_json::to_value(e.change.as_ref().unwrap()).unwrap();
        assert_eq!(change["packages"], expected_diff(source), "{ext}: {change}");
        // The config, then the one SBOM layer of the new digest; the old side is not refetched.
        assert_eq!(s.blob_gets(), 2, "{ext}: {:#?}", s.proxy.seen());
        // An unchanged check fetches nothing.
        s.proxy.clear();
        assert!(s.monitor.run_once().await);
        assert_eq!(s.blob_gets(), 0);
    }
}

/// `zstd -c` of `bytes` (the system's zstd: a real encoder's frames).
fn zstd(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = std::process::Command::new("zstd")
        .args(["-q", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("zstd is installed");
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("zstd output");
    writer.join().unwrap().expect("write to zstd");
    output.stdout
}

#[tokio::test]
async fn a_zstd_sbom_layer_is_read_too() {
    let zstd_run = |version: &str, packages: &[(&str, &str)]| {
        let tar = tar("cnb/sbom/bom.syft.json", &sbom("syft", packages));
        let blob = zstd(&tar);
        with_sbom_layer(
            version,
            Layer { digest: sha256(&blob), diff_id: sha256(&tar), blob, created_by: "SBOM".into() },
        )
    };
    let s = setup(&zstd_run("1", V1), "").await;
    let e = s.move_to(&zstd_run("2", V2)).await;
    let change = serde_json::to_value(e.change.as_ref().unwrap()).unwrap();
    assert_eq!(change["packages"], expected_diff("sbom:syft"), "{change}");
}

/// `GET /api/v1/changes` of a server over the setup's ledger.
async fn api_changes(s: &Setup) -> Value {
    let config = Arc::new(s.monitor.config().clone());
    let mut settings = config.server.clone().expect("[server] in the config");
    settings.api_token = Some(builder_monitor::config::Secret::new("token"));
    let state = Arc::new(ServerState::new(config, settings, s.monitor.handle(), s.ledger.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/api/v1/changes?limit=5", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(server::serve(state, listener, stop.clone()));
    let response = support::http().get(url).bearer_auth("token").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body = response.json().await.unwrap();
    stop.cancel();
    body
}

/// `n` bytes that do not compress (xorshift).
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn broken_lists_are_notes_and_the_move_is_still_reported() {
    let s = setup(&labelled("1", V1), "").await;
    let malformed = RunImage::jammy("2", 2).label("io.paketo.stack.packages", r#"[{"name": "openssl", "#);
    let missing = RunImage::jammy("3", 2).label("io.buildpacks.base.sbom", &format!("sha256:{}", "0".repeat(64)));
    let big = {
        let bytes = noise(9 << 20);
        Layer { digest: sha256(&bytes), diff_id: sha256(&bytes), blob: bytes, created_by: "noise".into() }
    };
    let over_cap = with_sbom_layer("4", big);
    let not_tar = with_sbom_layer("5", {
        let text = b"{\"components\": []} is JSON, not a tar".to_vec();
        Layer { digest: sha256(&gzip(&text)), diff_id: sha256(&text), blob: gzip(&text), created_by: "x".into() }
    });
    // (image, what the note says, blob GETs: the config, plus the layer when it is fetched).
    let cases = [
        (malformed, "label io.paketo.stack.packages is malformed", 1),
        (missing, "which is not a layer of the image", 1),
        (over_cap, "over the 8388608-byte limit; not read", 1),
        (not_tar, "not a readable tar", 2),
    ];
    for (image, note, blobs) in cases {
        let e = s.move_to(&image).await;
        let version = &image.version;
        let change = e.change.as_ref().unwrap();
        assert_eq!(change.kind.as_str(), "rebase", "{version}");
        assert!(change.packages.is_none(), "{version}: no false change: {change:?}");
        let said = change.packages_note.as_deref().unwrap_or_default();
        let new_side = said.split("new image: ").nth(1).unwrap_or_default();
        assert!(new_side.contains(note), "{version}: {said}");
        assert!(e.summary().contains("run image"), "{}", e.summary());
        assert_eq!(s.blob_gets(), blobs, "{version}: {:#?}", s.proxy.seen());
    }
    // After an unreadable list, a readable one has nothing to diff against: a note, no change.
    let e = s.move_to(&labelled("6", V2)).await;
    let change = e.change.as_ref().unwrap();
    assert!(change.packages.is_none());
    assert!(
        change.packages_note.as_deref().unwrap().starts_with("previous image: the SBOM layer is not a readable tar")
    );
}

async fn push_pair(s: &Setup, (amd, arm64): (RunImage, RunImage)) {
    let a = push_run(&s.pusher, REPO, None, &amd, Format::Oci).await;
    let b = push_run(&s.pusher, REPO, None, &arm64, Format::Oci).await;
    push_index(&s.pusher, REPO, "latest", &[(&a, &amd), (&b, &arm64)], None, Format::Oci).await;
}

#[tokio::test]
async fn two_platform_run_images_diff_per_platform_and_merge_when_equal() {
    let arm = |r: RunImage, packages: &[(&str, &str)]| {
        r.arch("arm64", None).label("io.paketo.stack.packages", &paketo_label(packages, "arm64"))
    };
    let pair = |version: &str, amd: &[(&str, &str)], arm64: &[(&str, &str)]| {
        (labelled(version, amd), arm(RunImage::jammy(version, 2), arm64))
    };
    let s = setup(&labelled("0", V1), "").await;
    push_pair(&s, pair("1", V1, V1)).await;
    s.check().await;

    // The same move on both platforms: one diff.
    push_pair(&s, pair("2", V2, V2)).await;
    let e = s.check().await;
    let change = serde_json::to_value(e.change.as_ref().unwrap()).unwrap();
    assert_eq!(change["packages"], expected_diff("io.paketo.stack.packages"));

    // Only amd64 moves back: each platform's diff, amd64's on top.
    push_pair(&s, pair("3", V1, V2)).await;
    let e = s.check().await;
    let packages = serde_json::to_value(e.change.as_ref().unwrap()).unwrap()["packages"].clone();
    assert_eq!(packages["changed"][0]["to"], "3.0.2-0ubuntu1.15");
    assert_eq!(packages["platforms"]["linux/amd64"]["changed"][0]["to"], "3.0.2-0ubuntu1.15");
    assert_eq!(
        packages["platforms"]["linux/arm64"],
        json!({"source": "io.paketo.stack.packages", "changed": [], "added": [], "removed": []})
    );
}

#[tokio::test]
async fn a_builder_moved_onto_a_new_run_image_names_the_run_image_packages() {
    let s = setup(&labelled("1", V1), "").await;
    // Republished while the run image watch is pinned: the pin keeps the run image's lists.
    let mut spec = BuilderSpec::jammy(&s.run);
    spec.description = "republished".into();
    s.push_builder(&spec).await;
    s.last(EventType::BuilderChanged).await;
    s.move_to(&labelled("2", V2)).await;
    spec.base[0] = "sha256:build-jammy-base-2".into();
    s.push_builder(&spec).await;
    let e = s.last(EventType::BuilderChanged).await;
    let change = serde_json::to_value(e.change.as_ref().unwrap()).unwrap();
    assert_eq!(change["kind"], "rebase");
    assert_eq!(change["reasons"], json!(["STACK", "RUN_IMAGE"]));
    assert_eq!(change["packages"], expected_diff("io.paketo.stack.packages"), "{change}");
    assert!(e.summary().contains("openssl 3.0.2-0ubuntu1.15 → 3.0.2-0ubuntu1.16"), "{}", e.summary());
}

#[tokio::test]
async fn an_alert_filtered_by_package_gets_only_the_moves_of_those_packages() {
    let (ssl, all) = (Receiver::start().await, Receiver::start().await);
    let alerts = format!(
        "[[alerts]]\nname = \"ssl\"\ntype = \"webhook\"\nurl = \"{}\"\nevents = [\"run_image.changed\"]\npackages = [\"openssl*\", \"libc6\"]\n\
         [[alerts]]\nname = \"all\"\ntype = \"webhook\"\nurl = \"{}\"\nevents = [\"run_image.changed\"]\n",
        ssl.url, all.url
    );
    let s = setup(&labelled("1", V1), &alerts).await;
    let openssl = s.move_to(&labelled("2", V2)).await;
    assert_eq!(s.dispatcher.deliver_due_once().await, 2);
    let tzdata_only: Vec<(&str, &str)> =
        V2.iter().map(|&(n, v)| if n == "tzdata" { (n, "2024b-0ubuntu0.22.04") } else { (n, v) }).collect();
    let tzdata = s.move_to(&labelled("3", &tzdata_only)).await;
    assert_eq!(tzdata.change.as_ref().unwrap().packages.as_ref().unwrap().changed[0].name, "tzdata");
    assert_eq!(s.dispatcher.deliver_due_once().await, 1);
    let ids =
        |r: &Receiver| r.received().iter().map(|m| m.json()["id"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(ids(&ssl), std::slice::from_ref(&openssl.id));
    assert_eq!(ids(&all), [openssl.id, tzdata.id]);
    let body = ssl.received()[0].json();
    assert_eq!(body["change"]["packages"]["changed"][0]["name"], "openssl");
}

#[tokio::test]
async fn diff_of_two_run_images_lists_their_package_moves() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    push_run(&pusher, REPO, Some("0.1.1"), &labelled("1", V1), Format::Oci).await;
    push_run(&pusher, REPO, Some("0.1.2"), &sbom_run("2", "cdx", V2), Format::Oci).await;
    push_run(&pusher, REPO, Some("0.1.3"), &sbom_run("3", "cdx", V1), Format::Oci).await;
    let (v1, v2, v3) = (
        format!("{}/{REPO}:0.1.1", registry.host),
        format!("{}/{REPO}:0.1.2", registry.host),
        format!("{}/{REPO}:0.1.3", registry.host),
    );
    let ws = Workspace::new();
    let out = ws.run(&["diff", &v3, &v2]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("rebase — run image "), "{}", out.stdout);
    assert!(
        lines[0]
            .ends_with("; openssl 3.0.2-0ubuntu1.15 → 3.0.2-0ubuntu1.16, libnew2 2.1-1 added, libgone1 1.0-1 removed"),
        "{}",
        out.stdout
    );
    assert_eq!(
        &lines[1..],
        [
            "OS packages (sbom:cyclonedx):",
            "    package   from               to",
            "    openssl   3.0.2-0ubuntu1.15  3.0.2-0ubuntu1.16",
            "    libnew2   –                  2.1-1",
            "    libgone1  1.0-1              –",
        ]
    );
    let out = ws.run(&["diff", &v3, &v2, "--json"]);
    let change: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(change["packages"], expected_diff("sbom:cyclonedx"));
    // Lists from different sources are not compared.
    let out = ws.run(&["diff", &v1, &v2]);
    assert!(out.stdout.contains("OS packages: the package lists come from different sources"), "{}", out.stdout);
}

/// `openssl` at `version` first, then 4,999 packages that never move, then one more entry (the
/// 5,001st, past the cap) that differs between the two images: as an SBOM's components.
fn over_the_cap(openssl: &str, last: &str) -> Vec<(String, String)> {
    let mut list = vec![("openssl".to_string(), openssl.to_string())];
    list.extend((0..4_999).map(|i| (format!("lib{i:04}"), "1.0-1".to_string())));
    list.push((last.to_string(), "1.0-1".to_string()));
    list
}

fn cut_sbom_run(version: &str, packages: &[(String, String)]) -> RunImage {
    let packages: Vec<(&str, &str)> = packages.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    sbom_run(version, "cdx", &packages)
}

/// A run image whose SBOM lists one component past the cap (5,001, the fewest over it), through
/// the real binary: the pin keeps the first 5,000 and says the list was cut in `status --json`;
/// the next move compares only what was read (the 5,001st entries, one gone and one new, are
/// neither removed nor added) and its change says both lists were cut, naming each image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_cut_at_the_cap_is_noted_at_the_pin_and_in_the_next_change() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let first = push_run(
        &pusher,
        REPO,
        Some("latest"),
        &cut_sbom_run("1", &over_the_cap("3.0.2-0ubuntu1.15", "libbeyond1")),
        Format::Oci,
    )
    .await;
    let run = format!("{}/{REPO}:latest", registry.host);
    pusher.push_image("paketo/builder", Some("latest"), &BuilderSpec::jammy(&run).image(), Format::Oci).await;
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n[[builders]]\nname = \"base\"\nimage = \"{}/paketo/builder:latest\"\n",
        registry.host
    ));
    let config = config.to_str().unwrap();
    let status = || {
        let out = ws.run(&["status", "--json", "--config", config]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str::<Value>(&out.stdout).unwrap()
    };
    let out = ws.run(&["run", "--once", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let note = |digest: &str| {
        format!(
            "the package list of {}/{REPO}@{digest} was cut at 5000 entries (the most read of a list): packages beyond them are not compared",
            registry.host
        )
    };
    let pinned = &status()["run_images"][0];
    assert_eq!(pinned["pinned"]["digest"], first.digest.as_str(), "{pinned}");
    assert_eq!(pinned["notes"], json!([note(&first.digest)]), "{pinned}");

    let second = push_run(
        &pusher,
        REPO,
        Some("latest"),
        &cut_sbom_run("2", &over_the_cap("3.0.2-0ubuntu1.16", "libbeyond2")),
        Format::Oci,
    )
    .await;
    let out = ws.run(&["run", "--once", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let moved = &status()["run_images"][0];
    assert_eq!(moved["notes"], json!([note(&second.digest)]), "the new pin's own note: {moved}");
    let change = &moved["changes"][0];
    assert_eq!(change["packages_note"], format!("{}; {}", note(&first.digest), note(&second.digest)), "{change}");
    assert_eq!(
        change["packages"],
        json!({"source": "sbom:cyclonedx",
               "changed": [{"name": "openssl", "from": "3.0.2-0ubuntu1.15", "to": "3.0.2-0ubuntu1.16"}],
               "added": [], "removed": []}),
        "{change}"
    );
    assert_eq!(change["notes"], json!([note(&second.digest)]), "{change}");
}

//! A start over a ConfigMap ledger of many watches, on the real control plane (issue 62 item 2,
//! issue 64 goal 5): a daemon restarted over a ledger holding N builders' entries reads it in the
//! same requests whatever N — one LIST of the ledger's ConfigMaps shared by every family's read,
//! no GET per watch, its permissions reviewed at once ([`START`]) — counted by a
//! proxy that records every request it makes to the API server (`support::api_recorder`), from
//! its start until it has checked every builder once (its `/readyz` turns ready then).
//!
//! The figures in docs/bench/ledger-start.md come from this test run with
//! `BM_LEDGER_START_WATCHES=1000` and `BM_LEDGER_START_BINARY` naming a release build (see there);
//! by default it compares 10 with 200 watches.

use crate::support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::api_recorder::{ApiRecorder, Recorded};
use support::app::{self, RunImage};
use support::cnb::BuilderSpec;
use support::control_plane::control_plane;
use support::daemon::{BINARY, Daemon, Workspace};
use support::images::{Format, Pusher};
use support::registry::TestRegistry;

const FEW: usize = 10;

/// What a start asks of the API server, but for the GETs of one ConfigMap (see the test): its
/// permissions (one review per verb, one of the namespace's `get`), the namespace, and one LIST
/// of the ledger shared by every read of its start.
const START: &[(&str, usize)] = &[("GET namespaces", 1), ("LIST configmaps", 1), ("POST selfsubjectaccessreviews", 5)];

/// How many watches the larger ledger holds (`BM_LEDGER_START_WATCHES`, 200 by default).
fn many() -> usize {
    std::env::var("BM_LEDGER_START_WATCHES").ok().and_then(|n| n.parse().ok()).unwrap_or(200)
}

/// The daemon measured (`BM_LEDGER_START_BINARY`, else the tests' build).
fn binary() -> PathBuf {
    std::env::var_os("BM_LEDGER_START_BINARY").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(BINARY))
}

/// What the daemon asked of the API server from its start until ready, and how long that took.
struct Start {
    requests: Vec<Recorded>,
    ready_after: Duration,
}

impl Start {
    /// Requests by verb and resource (`LIST configmaps` → 3).
    fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for r in &self.requests {
            let key = match r.verb() {
                "OTHER" => format!("OTHER {}", r.path),
                verb => format!("{verb} {}", r.resource()),
            };
            *counts.entry(key).or_default() += 1;
        }
        counts
    }
}

/// Tags `demo/builder:latest` as `b0`…`b{n-1}` (one manifest PUT each).
async fn tag_builders(host: &str, n: usize) {
    let http = support::http();
    let media = Format::Oci.manifest();
    let manifest = http
        .get(format!("http://{host}/v2/demo/builder/manifests/latest"))
        .header("accept", media)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    for i in 0..n {
        let put = http
            .put(format!("http://{host}/v2/demo/builder/manifests/b{i}"))
            .header("content-type", media)
            .body(manifest.clone())
            .send()
            .await
            .unwrap();
        assert!(put.status().is_success(), "tag b{i}: {}", put.status());
    }
}

const READY: &str = "every builder checked once: ready";

/// A ledger of `watches` builders' entries (written by a first start, which pins them all), and the
/// restart over it, recorded.
async fn restart_over(watches: usize) -> Start {
    let registry = TestRegistry::start();
    let host = registry.host.clone();
    let pusher = Pusher::new(&host);
    let run_tag = format!("{host}/demo/run:latest");
    app::push_run(&pusher, "demo/run", Some("latest"), &RunImage::jammy("1", 3), Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
    tag_builders(&host, watches).await;
    let ns = control_plane().namespace("ledger-start").await;
    let recorder = ApiRecorder::start(control_plane().client().await).await;
    let ws = Workspace::new();
    let kubeconfig = recorder.kubeconfig(&ws.path(""), &ns.name);
    let builders: String = (0..watches)
        .map(|i| format!("[[builders]]\nname = \"b{i}\"\nimage = \"{host}/demo/builder:b{i}\"\n\n"))
        .collect();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"kubernetes\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
         [registries.\"{host}\"]\ninsecure = true\nrequests_per_second = 0\n\n{builders}\
         [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{}\"\n",
        kubeconfig.display(),
        ns.name,
    ));
    // The ready line is DEBUG under its own target: only it is added to INFO.
    let env = [("BUILDER_MONITOR_LOG", "info,builder_monitor::ready=debug")];
    // The first start pins every builder (and the run image): the ledger's entries.
    let mut first = Daemon::start_binary(&binary(), &config, &env);
    let patience = support::PATIENCE * (1 + watches as u32 / 100);
    tokio::task::block_in_place(|| {
        first.wait_longer("the first start's first cycle", patience, |v| v["message"] == READY)
    })
    .unwrap_or_else(|status| panic!("the first daemon exited ({status}): {}", first.log.join("\n")));
    let (status, log) = first.terminate();
    assert!(status.success(), "{}", log.join("\n"));

    recorder.clear();
    let started = Instant::now();
    let mut restarted = Daemon::start_binary(&binary(), &config, &env);
    tokio::task::block_in_place(|| {
        restarted.wait_longer("the restart's first cycle", patience, |v| v["message"] == READY)
    })
    .unwrap_or_else(|status| panic!("the restarted daemon exited ({status}): {}", restarted.log.join("\n")));
    let ready_after = started.elapsed();
    let requests = recorder.requests();
    let (status, log) = restarted.terminate();
    assert!(status.success(), "{}", log.join("\n"));
    Start { requests, ready_after }
}

/// The same requests, verb by verb, at 10 watches and at many: a start reads the ledger in lists,
/// never one GET per watch. A count, not a time; the time is printed for the benchmark's note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_over_many_watches_makes_the_same_requests_as_over_few() {
    let few = restart_over(FEW).await;
    let many_watches = many();
    let many = restart_over(many_watches).await;
    for (n, start) in [(FEW, &few), (many_watches, &many)] {
        eprintln!(
            "ledger start: {n} watches: ready after {:.3} s, {} requests: {:?}",
            start.ready_after.as_secs_f64(),
            start.requests.len(),
            start.counts()
        );
    }
    // Every kind of request the same, verb by verb, but the GETs of one ConfigMap: the daemon
    // reads one (not per watch) about once a second while it starts, so a slower start on a
    // loaded machine makes a few more. Those stay far below one per watch.
    let without_gets = |start: &Start| {
        let mut counts = start.counts();
        counts.remove("GET configmaps");
        counts
    };
    assert_eq!(without_gets(&few), without_gets(&many), "the requests of a start grew with the watches");
    let expected: BTreeMap<String, usize> = START.iter().map(|&(what, n)| (what.to_string(), n)).collect();
    assert_eq!(without_gets(&few), expected, "the requests of a start");
    for (n, start) in [(FEW, &few), (many_watches, &many)] {
        let gets = start.counts().get("GET configmaps").copied().unwrap_or(0);
        assert!(gets <= FEW.max(n / 10), "{gets} GETs of ConfigMaps at {n} watches: {:?}", start.counts());
    }
}

//! Item 6: what reading a run image's OS package lists costs, per kind of image.

use super::*;

/// A Paketo `io.paketo.stack.packages` label of `n` packages at `version`.
pub(crate) fn paketo_label(n: usize, version: &str, arch: &str) -> String {
    let list: Vec<Value> = (0..n)
        .map(|i| {
            json!({"name": format!("lib{i:03}"), "version": version, "arch": arch,
                        "source": {"name": format!("lib{i:03}"), "version": version}, "summary": "bench"})
        })
        .collect();
    serde_json::to_string(&list).unwrap()
}

/// `run` with a last layer holding a CycloneDX SBOM of `n` packages, named by the base label.
pub(crate) fn with_sbom(mut run: support::app::RunImage, version: &str, n: usize) -> support::app::RunImage {
    let doc = json!({"bomFormat": "CycloneDX", "components": (0..n).map(|i| json!({"name": format!("lib{i:03}"), "version": version,
        "purl": format!("pkg:deb/ubuntu/lib{i:03}@{version}?arch={}", run.architecture)})).collect::<Vec<_>>()});
    let tar = support::app::tar("cnb/sbom/bom.cdx.json", &serde_json::to_vec(&doc).unwrap());
    let blob = support::app::gzip(&tar);
    let layer = support::app::Layer { digest: sha256(&blob), diff_id: sha256(&tar), blob, created_by: "SBOM".into() };
    run.layers.push(layer);
    let top = run.top_diff_id();
    run.label("io.buildpacks.base.sbom", &top)
}

/// How a case's run image lists its packages.
#[derive(Clone, Copy)]
pub(crate) enum Listing {
    Label,
    SbomLayer,
    Nothing,
}

pub(crate) fn run_image(version: &str, listing: Listing, arch: &str) -> support::app::RunImage {
    let run = support::app::RunImage::jammy(version, 2);
    let run = if arch == "amd64" { run } else { run.arch(arch, None) };
    match listing {
        Listing::SbomLayer => with_sbom(run, version, 100),
        Listing::Label => run.label("io.paketo.stack.packages", &paketo_label(100, version, arch)),
        Listing::Nothing => run,
    }
}

/// Pushes version `version` of the case's run image under `bench/run:latest`.
pub(crate) async fn push_run_case(pusher: &Pusher, version: &str, listing: Listing, platforms: usize) {
    use support::app::{push_index, push_run};
    if platforms == 1 {
        push_run(pusher, "bench/run", Some("latest"), &run_image(version, listing, "amd64"), Format::Oci).await;
        return;
    }
    let runs: Vec<_> = ["amd64", "arm64"].iter().map(|a| run_image(version, listing, a)).collect();
    let mut pushed = Vec::new();
    for run in &runs {
        pushed.push(push_run(pusher, "bench/run", None, run, Format::Oci).await);
    }
    let children: Vec<_> = pushed.iter().zip(&runs).collect();
    push_index(pusher, "bench/run", "latest", &children, None, Format::Oci).await;
}

/// Item 6: requests of the check that finds a new run image digest, counted at a proxy, for single
/// manifests and two-platform indexes listing 100 packages in the label, in an SBOM layer, or not
/// at all. "Before" is the requests the check made without package lists (the tag's HEAD and GET,
/// and a single manifest's config, which it reads for its platform); the rest are the lists'.
pub(crate) async fn package_costs() -> Value {
    let mut cases = Vec::new();
    for (name, listing, platforms) in [
        ("single manifest, label", Listing::Label, 1),
        ("single manifest, SBOM layer", Listing::SbomLayer, 1),
        ("single manifest, no list", Listing::Nothing, 1),
        ("2-platform index, label", Listing::Label, 2),
        ("2-platform index, SBOM layers", Listing::SbomLayer, 2),
        ("2-platform index, no list", Listing::Nothing, 2),
    ] {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let proxy = Proxy::start(&registry.host).await;
        push_run_case(&pusher, "1", listing, platforms).await;
        let run = format!("{}/bench/run:latest", proxy.host);
        pusher.push_image("bench/builder", Some("latest"), &BuilderSpec::jammy(&run).image(), Format::Oci).await;
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[monitor]\nstate = \"state.db\"\n[registries.\"{}\"]\nrequests_per_second = 0\n[[builders]]\nname = \"b\"\nimage = \"{}/bench/builder:latest\"\n",
            proxy.host, registry.host
        );
        let config = Arc::new(Config::parse(&dir.path().join("config.toml"), &text).unwrap());
        let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
        let monitor = Parts::new(config, ledger, Clock::System, None).unwrap().monitor;
        assert!(monitor.run_once().await, "{name}: first check");
        push_run_case(&pusher, "2", listing, platforms).await;
        proxy.clear();
        assert!(monitor.run_once().await, "{name}: the move");
        let seen = proxy.seen();
        let manifests = seen.iter().filter(|r| r.method == "GET" && r.path.contains("/manifests/")).count();
        let blobs = seen.iter().filter(|r| r.method == "GET" && r.path.contains("/blobs/")).count();
        let heads = seen.iter().filter(|r| r.method == "HEAD").count();
        // Without lists: HEAD and GET of the tag, plus a single manifest's config blob.
        let (base_manifests, base_blobs) = (1, usize::from(platforms == 1));
        let before = heads + base_manifests + base_blobs;
        proxy.clear();
        assert!(monitor.run_once().await, "{name}: unchanged");
        let unchanged = proxy.seen().len();
        say(format!(
            "6. {name}: {before} requests before, {} with package lists; {unchanged} per unchanged check",
            seen.len()
        ));
        cases.push(json!({
            "image": name, "platforms": platforms, "before": before, "after": seen.len(),
            "extra": seen.len() - before, "extra_manifests": manifests - base_manifests, "extra_blobs": blobs - base_blobs,
            // An index's platform configs are the lists' (a single manifest's is read anyway).
            "extra_configs": if platforms == 1 { 0 } else { platforms }, "extra_layers": blobs - base_blobs - if platforms == 1 { 0 } else { platforms },
            "unchanged_check_requests": unchanged,
            "requests": seen.iter().map(|r| format!("{} {}", r.method, r.path)).collect::<Vec<_>>(),
        }));
    }
    Value::Array(cases)
}

/// A loopback port free now. Picked in advance because the registry's hook and the daemon's
/// metrics address need it before the daemon starts; the benchmark runs one thing at a time, so
/// nothing races for it (the tests, which run in parallel, read the bound address instead).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

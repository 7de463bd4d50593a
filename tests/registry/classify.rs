//! Explaining moves against a real registry: a corpus of builder pairs through `diff`, the change
//! object of `builder.changed`, and run image watches (`run_image.changed`).

use crate::support;

use std::sync::Arc;

use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::Ledger;
use builder_monitor::monitor::Monitor;
use builder_monitor::registry::Registry;
use builder_monitor::schedule::Clock;
use builder_monitor_core::event::EventType;
use serde_json::Value;
use support::app::{self, RunImage};
use support::cnb::BuilderSpec;
use support::daemon::Workspace;
use support::images::{Format, Image, Pusher};
use support::proxy::Proxy;
use support::registry::TestRegistry;

const RUN: &str = "index.docker.io/paketobuildpacks/run-jammy-base:latest";

struct Pair {
    name: &'static str,
    old: Vec<BuilderSpec>,
    new: Vec<BuilderSpec>,
    kind: &'static str,
    reasons: &'static [&'static str],
}

fn pair(
    name: &'static str,
    old: BuilderSpec,
    new: BuilderSpec,
    kind: &'static str,
    reasons: &'static [&'static str],
) -> Pair {
    Pair { name, old: vec![old], new: vec![new], kind, reasons }
}

fn corpus() -> Vec<Pair> {
    let jammy = || BuilderSpec::jammy(RUN);
    let heroku = || BuilderSpec::heroku("docker.io/heroku/heroku:24");
    let mut pairs = vec![
        pair(
            "identical content, new digest",
            jammy(),
            {
                let mut b = jammy();
                b.description = "reworded".into();
                b
            },
            "none",
            &[],
        ),
        pair(
            "base layers patched",
            jammy(),
            {
                let mut b = jammy();
                b.base[0] = "sha256:build-jammy-base-2".into();
                b
            },
            "rebase",
            &["STACK"],
        ),
        pair("java bumped", jammy(), jammy().bump("paketo-buildpacks/java", "18.2.0"), "rebuild", &["BUILDPACK"]),
        pair(
            "java bumped and base patched",
            jammy(),
            {
                let mut b = jammy().bump("paketo-buildpacks/java", "18.2.0");
                b.base[0] = "sha256:build-jammy-base-2".into();
                b
            },
            "rebuild",
            &["STACK", "BUILDPACK"],
        ),
        pair(
            "buildpack removed",
            jammy(),
            {
                let mut b = jammy();
                b.buildpacks.pop();
                b.order.pop();
                b
            },
            "rebuild",
            &["BUILDPACK", "ORDER"],
        ),
        pair(
            "buildpack added",
            jammy(),
            {
                let mut b = jammy();
                b.buildpacks.push(("paketo-buildpacks/python".into(), "2.1.0".into(), "sha256:py".into()));
                b
            },
            "rebuild",
            &["BUILDPACK"],
        ),
        pair(
            "lifecycle only",
            jammy(),
            {
                let mut b = jammy();
                b.lifecycle = "0.21.14".into();
                b
            },
            "rebuild",
            &["LIFECYCLE"],
        ),
        pair(
            "stack id changed",
            jammy(),
            {
                let mut b = jammy();
                b.stack_id = "io.buildpacks.stacks.noble".into();
                b
            },
            "rebuild",
            &["STACK_ID"],
        ),
        pair(
            "detection order changed",
            jammy(),
            {
                let mut b = jammy();
                b.order.reverse();
                b
            },
            "rebuild",
            &["ORDER"],
        ),
        pair(
            "buildpack republished under the same version",
            jammy(),
            {
                let mut b = jammy();
                b.buildpacks[1].2 = "sha256:nodejs-7.2.0-rebuilt".into();
                b
            },
            "rebuild",
            &["BUILDPACK"],
        ),
        pair(
            "run image renamed",
            jammy(),
            {
                let mut b = jammy();
                b.run_image = "docker.io/paketobuildpacks/run-jammy-base:0.2".into();
                b
            },
            "rebase",
            &["STACK", "RUN_IMAGE"],
        ),
        pair(
            "not a CNB builder any more",
            jammy(),
            {
                let mut b = jammy();
                b.cnb = false;
                b
            },
            "unknown",
            &[],
        ),
        pair("arch changed", jammy(), jammy().arch("arm64"), "rebuild", &["STACK_ID"]),
        pair("heroku nodejs bumped", heroku(), heroku().bump("heroku/nodejs", "3.3.0"), "rebuild", &["BUILDPACK"]),
        pair(
            "heroku lifecycle bumped",
            heroku(),
            {
                let mut b = heroku();
                b.lifecycle = "0.21.13".into();
                b
            },
            "rebuild",
            &["LIFECYCLE"],
        ),
    ];
    let patched = {
        let mut b = jammy().arch("arm64");
        b.base[0] = "sha256:build-jammy-base-arm64-2".into();
        b
    };
    pairs.push(Pair {
        name: "two platforms: amd64 rebuilds, arm64 rebases",
        old: vec![jammy(), jammy().arch("arm64")],
        new: vec![jammy().bump("paketo-buildpacks/go", "4.15.0"), patched],
        kind: "rebuild",
        reasons: &["STACK", "BUILDPACK"],
    });
    pairs
}

async fn push(pusher: &Pusher, repo: &str, tag: &str, specs: &[BuilderSpec]) -> String {
    let images: Vec<Image> = specs.iter().map(BuilderSpec::image).collect();
    if images.len() == 1 {
        pusher.push_image(repo, Some(tag), &images[0], Format::Oci).await.digest
    } else {
        pusher.push_index(repo, tag, &images, Format::Oci).await.0.digest
    }
}

/// `diff` takes the short digests `status` and the page show (`REPO@sha256:` + 12 or more hex
/// digits): one the ledger pinned (no tag holds it any more), one the tag holds now; each resolved
/// one is said in full. A prefix nothing known starts is refused, naming where it looked.
#[tokio::test]
async fn diff_takes_short_digests_the_ledger_or_the_tag_knows() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let ws = Workspace::new();
    let jammy = || BuilderSpec::jammy(RUN);
    let image = format!("{}/short/builder", registry.host);
    let old = push(&pusher, "short/builder", "latest", &[jammy()]).await;
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n[[builders]]\nname = \"b\"\nimage = \"{image}:latest\"\nwatch_run_image = false\n"
    ));
    let config = config.to_str().unwrap();
    let pinned = ws.run(&["run", "--once", "--config", config]);
    assert_eq!(pinned.code, Some(0), "{}", pinned.stderr);
    let new = push(&pusher, "short/builder", "latest", &[jammy().bump("paketo-buildpacks/java", "18.2.0")]).await;
    let (old_short, new_short) = (format!("{image}@{}", &old[..19]), format!("{image}@{}", &new[..19]));

    let out = ws.run(&["diff", &old_short, &new_short, "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let explained = "rebuild — paketo-buildpacks/java 18.1.0 → 18.2.0";
    assert_eq!(out.stdout.trim(), explained);
    assert!(out.stderr.contains(&format!("{} is {old}\n", &old[..19])), "{}", out.stderr);
    // One explanation: the daemon's event for this move and `status` say what `diff` said.
    let moved = ws.run(&["run", "--once", "--config", config]);
    assert_eq!(moved.code, Some(0), "{}", moved.stderr);
    assert!(moved.stderr.contains(&format!("builder.changed b: {explained}")), "{}", moved.stderr);
    let status = ws.run(&["status", "--json", "--config", config]);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(status["builders"][0]["changes"][0]["summary"], explained, "{status:#}");
    let human = ws.run(&["status", "--config", config]);
    assert!(human.stdout.contains(explained), "{}", human.stdout);
    assert!(out.stderr.contains(&format!("{} is {new}\n", &new[..19])), "{}", out.stderr);
    // Bare hex digits too.
    let bare = ws.run(&["diff", &format!("{image}@{}", &old[7..23]), &new_short, "--config", config, "--json"]);
    assert_eq!(bare.code, Some(0), "{}", bare.stderr);
    assert_eq!(serde_json::from_str::<Value>(&bare.stdout).unwrap()["kind"], "rebuild");

    // `resolve` takes one too (and `rebase --run-image`, the same way).
    let resolved = ws.run(&["resolve", &old_short, "--config", config, "--json"]);
    assert_eq!(resolved.code, Some(0), "{}", resolved.stderr);
    assert!(resolved.stdout.contains(&old), "{}", resolved.stdout);

    // Without the config's ledger, only what the tag holds is known.
    let unknown = ws.run(&["diff", &old_short, &new_short]);
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains(&format!(
            "{} matches none of the digests recorded for {image} and the ones its tag latest holds",
            &old[..19]
        )),
        "{}",
        unknown.stderr
    );
}

#[tokio::test]
async fn diff_classifies_a_corpus_of_builder_pairs() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let ws = Workspace::new();
    let corpus = corpus();
    assert!(corpus.len() >= 12);
    for (i, p) in corpus.iter().enumerate() {
        let repo = format!("corpus/pair{i}");
        push(&pusher, &repo, "old", &p.old).await;
        push(&pusher, &repo, "new", &p.new).await;
        let (old, new) = (format!("{}/{repo}:old", registry.host), format!("{}/{repo}:new", registry.host));
        let out = ws.run(&["diff", &old, &new, "--json"]);
        assert_eq!(out.code, Some(0), "{}: {}", p.name, out.stderr);
        let change: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(change["kind"], p.kind, "{}: {change:#}", p.name);
        let reasons: Vec<&str> = change["reasons"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
        assert_eq!(reasons, p.reasons, "{}: {change:#}", p.name);
    }

    // The human summary names what moved.
    let out = ws.run(&[
        "diff",
        &format!("{}/corpus/pair2:old", registry.host),
        &format!("{}/corpus/pair2:new", registry.host),
    ]);
    assert_eq!(out.stdout.trim(), "rebuild — paketo-buildpacks/java 18.1.0 → 18.2.0");
    let out = ws.run(&[
        "diff",
        &format!("{}/corpus/pair6:old", registry.host),
        &format!("{}/corpus/pair6:new", registry.host),
    ]);
    assert_eq!(out.stdout.trim(), "rebuild — lifecycle 0.21.13 → 0.21.14");
    let multi = corpus.len() - 1;
    let out = ws.run(&[
        "diff",
        &format!("{}/corpus/pair{multi}:old", registry.host),
        &format!("{}/corpus/pair{multi}:new", registry.host),
    ]);
    assert!(
        out.stdout.contains("linux/amd64: rebuild") && out.stdout.contains("linux/arm64: rebase"),
        "{}",
        out.stdout
    );
}

/// Two run images without package lists: the diff says what it can and cannot compare, not that
/// they are no builders one side at a time.
#[tokio::test]
async fn diff_of_two_run_images_without_package_lists_says_what_is_missing() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("run/plain", Some("1"), &Image::new("amd64").salt("run-1"), Format::Oci).await;
    pusher.push_image("run/plain", Some("2"), &Image::new("amd64").salt("run-2"), Format::Oci).await;
    let ws = Workspace::new();
    let (old, new) = (format!("{}/run/plain:1", registry.host), format!("{}/run/plain:2", registry.host));
    let out = ws.run(&["diff", &old, &new, "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let change: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(change["kind"], "unknown", "{change:#}");
    let note = change["note"].as_str().unwrap();
    assert!(note.contains("neither lists its OS packages"), "{note}");
    assert!(!note.contains("the previous image is not a CNB builder"), "{note}");
}

#[tokio::test]
async fn resolve_describes_a_builder() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let spec = BuilderSpec::heroku("docker.io/heroku/heroku:24");
    push(&pusher, "heroku/builder", "24", &[spec.clone(), spec.clone().arch("arm64")]).await;
    let ws = Workspace::new();
    let out = ws.run(&["resolve", &format!("{}/heroku/builder:24", registry.host), "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let b = &v["builder"];
    assert_eq!(b["stack_id"], "heroku-24");
    assert_eq!(b["lifecycle"]["version"], "0.21.12");
    assert_eq!(b["run_images"][0]["image"], "docker.io/heroku/heroku:24");
    assert_eq!(b["run_images"][0]["mirrors"][0], "public.ecr.aws/heroku/heroku:24");
    assert_eq!(b["buildpacks"].as_array().unwrap().len(), 2);
    assert_eq!(b["target"]["arch"], "amd64", "the linux/amd64 platform is described");
    let text = ws.run(&["resolve", &format!("{}/heroku/builder:24", registry.host)]);
    assert!(
        text.stdout.contains("stack:      heroku-24") && text.stdout.contains("heroku/nodejs 3.2.1"),
        "{}",
        text.stdout
    );
}

struct Setup {
    monitor: Arc<Monitor>,
    ledger: Ledger,
    _dir: tempfile::TempDir,
}

fn setup(text: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(Config::parse(&dir.path().join("config.toml"), text).unwrap());
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let monitor = Parts::new(config, ledger.clone(), Clock::System, None).unwrap().monitor;
    Setup { monitor, ledger, _dir: dir }
}

async fn events(ledger: &Ledger) -> Vec<builder_monitor_core::event::Event> {
    ledger.events_after(0, 1000).await.unwrap().into_iter().map(|e| e.event).collect()
}

#[tokio::test]
async fn builder_changed_events_carry_the_classification() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let run = format!("{}/paketo/run-jammy-base:latest", registry.host);
    pusher.push_image("paketo/run-jammy-base", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let v1 = BuilderSpec::jammy(&run);
    push(&pusher, "paketo/builder", "latest", &[v1.clone(), v1.clone().arch("arm64")]).await;
    let s = setup(&format!(
        "[monitor]\nstate = \"x.db\"\n[[builders]]\nname = \"jammy\"\nimage = \"{}/paketo/builder:latest\"\nwatch_run_image = false\n",
        registry.host
    ));
    s.monitor.check_builder("jammy").await.unwrap().unwrap();

    let v2 = v1.clone().bump("paketo-buildpacks/java", "18.2.0");
    push(&pusher, "paketo/builder", "latest", &[v2.clone(), v2.arch("arm64")]).await;
    s.monitor.check_builder("jammy").await.unwrap().unwrap();
    let events = events(&s.ledger).await;
    assert_eq!(
        events.iter().map(|e| e.event_type).collect::<Vec<_>>(),
        [EventType::BuilderPinned, EventType::BuilderChanged]
    );
    let change = serde_json::to_value(events[1].change.as_ref().unwrap()).unwrap();
    assert_eq!(change["kind"], "rebuild");
    assert_eq!(change["reasons"], serde_json::json!(["BUILDPACK"]));
    assert_eq!(
        change["buildpacks"],
        serde_json::json!([{"id": "paketo-buildpacks/java", "from": "18.1.0", "to": "18.2.0"}])
    );
    assert!(change["lifecycle"].is_null());
    assert!(change["run_image"].is_null(), "same run image digest: {change}");
    assert_eq!(change["platforms"]["linux/arm64"]["kind"], "rebuild");

    // The pinned metadata is kept, so the next move compares against it without refetching it.
    let record = s.ledger.watch("jammy").await.unwrap().unwrap();
    let pinned = record.pinned_metadata().unwrap();
    let pinned_run = pinned.run_image.unwrap();
    assert_eq!(pinned_run.image, run);
    assert!(pinned_run.reference.unwrap().starts_with(&format!("{}/paketo/run-jammy-base@sha256:", registry.host)));
}

/// `diff` of two CNB run images and the daemon's move of a watched run image between the same two
/// say the same: a rebase within one release, a rebuild onto another, with the same summary.
#[tokio::test]
async fn diff_and_the_daemon_classify_a_run_image_move_alike() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let mut noble = RunImage::jammy("3", 2);
    for (label, value) in [
        ("io.buildpacks.stack.id", "io.buildpacks.stacks.noble"),
        ("io.buildpacks.base.id", "io.buildpacks.stacks.noble"),
        ("io.buildpacks.base.distro.version", "24.04"),
    ] {
        noble.labels.insert(label.into(), value.into());
    }
    let runs = [("1", RunImage::jammy("1", 2)), ("2", RunImage::jammy("2", 2)), ("3", noble)];
    for (tag, run) in &runs {
        app::push_run(&pusher, "cnb/run", Some(tag), run, Format::Oci).await;
    }
    let run = format!("{}/cnb/run:latest", registry.host);
    app::push_run(&pusher, "cnb/run", Some("latest"), &runs[0].1, Format::Oci).await;
    push(&pusher, "cnb/builder", "latest", &[BuilderSpec::jammy(&run)]).await;
    let s = setup(&format!(
        "[monitor]\nstate = \"x.db\"\n[[builders]]\nname = \"jammy\"\nimage = \"{}/cnb/builder:latest\"\n",
        registry.host
    ));
    assert!(s.monitor.run_once().await);
    let ws = Workspace::new();
    for ((from, _), (to, image), kind) in [(&runs[0], &runs[1], "rebase"), (&runs[1], &runs[2], "rebuild")] {
        app::push_run(&pusher, "cnb/run", Some("latest"), image, Format::Oci).await;
        assert!(s.monitor.run_once().await);
        let event = events(&s.ledger).await.into_iter().rfind(|e| e.event_type == EventType::RunImageChanged).unwrap();
        let daemon = event.change.unwrap();
        let (old, new) = (format!("{}/cnb/run:{from}", registry.host), format!("{}/cnb/run:{to}", registry.host));
        let out = ws.run(&["diff", &old, &new, "--json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let diffed: builder_monitor_core::cnb::Change = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(diffed.kind.as_str(), kind, "{}", out.stdout);
        assert_eq!(daemon.kind.as_str(), kind, "{daemon:#?}");
        // The same references on both sides: the tags :N and :latest point at the same digests.
        assert_eq!(diffed.summary(), daemon.summary());
        assert_eq!(diffed.reasons, daemon.reasons);
        let text = ws.run(&["diff", &old, &new]);
        assert_eq!(text.stdout.lines().next(), Some(daemon.summary().as_str()), "{}", text.stdout);
    }
    let rebuild = events(&s.ledger).await.into_iter().rfind(|e| e.event_type == EventType::RunImageChanged).unwrap();
    let summary = rebuild.change.unwrap().summary();
    assert!(
        summary.starts_with("rebuild — stack io.buildpacks.stacks.jammy → io.buildpacks.stacks.noble; distro ubuntu 22.04 → ubuntu 24.04; run image "),
        "{summary}"
    );
}

#[tokio::test]
async fn run_images_are_watched_once_for_all_builders_naming_them() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let proxy = Proxy::start(&registry.host).await;
    // The builders name the run image through the proxy, so its checks can be counted.
    let run = format!("{}/paketo/run-jammy-base:latest", proxy.host);
    let r1 = pusher
        .push_index("paketo/run-jammy-base", "latest", &[Image::new("amd64"), Image::new("arm64")], Format::Oci)
        .await
        .0;
    push(&pusher, "paketo/builder-base", "latest", &[BuilderSpec::jammy(&run)]).await;
    let mut full = BuilderSpec::jammy(&run);
    full.description = "full".into();
    push(&pusher, "paketo/builder-full", "latest", &[full]).await;
    let s = setup(&format!(
        "[monitor]\nstate = \"x.db\"\n[[builders]]\nname = \"base\"\nimage = \"{0}/paketo/builder-base:latest\"\n[[builders]]\nname = \"full\"\nimage = \"{0}/paketo/builder-full:latest\"\n",
        registry.host
    ));
    assert!(s.monitor.run_once().await);
    let watches = s.monitor.run_image_watches();
    assert_eq!(watches.len(), 1);
    assert_eq!(watches[0].0.image.to_string(), run);
    assert_eq!(watches[0].1, ["base", "full"]);
    let run_record = s.ledger.watch(&watches[0].0.name).await.unwrap().unwrap();
    assert_eq!(run_record.pin.unwrap().digest, r1.digest);

    let r2 = pusher
        .push_index(
            "paketo/run-jammy-base",
            "latest",
            &[Image::new("amd64").salt("2"), Image::new("arm64").salt("2")],
            Format::Oci,
        )
        .await
        .0;
    proxy.clear();
    assert!(s.monitor.run_once().await);
    let heads = proxy.seen().iter().filter(|r| r.method == "HEAD" && r.path.contains("/manifests/latest")).count();
    assert_eq!(heads, 1, "two builders, one run image check: {:#?}", proxy.seen());

    let events = events(&s.ledger).await;
    let changed: Vec<_> = events.iter().filter(|e| e.event_type == EventType::RunImageChanged).collect();
    assert_eq!(changed.len(), 1);
    let e = serde_json::to_value(changed[0]).unwrap();
    assert_eq!(e["run_image"], run);
    assert_eq!(
        e["builders"].as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap()).collect::<Vec<_>>(),
        ["base", "full"]
    );
    assert_eq!(e["builder"]["name"], "base");
    assert_eq!(e["change"]["kind"], "rebase");
    assert_eq!(e["change"]["reasons"], serde_json::json!(["STACK", "RUN_IMAGE"]));
    assert_eq!(e["change"]["run_image"]["from"], format!("{}/paketo/run-jammy-base@{}", proxy.host, r1.digest));
    assert_eq!(e["change"]["run_image"]["to"], format!("{}/paketo/run-jammy-base@{}", proxy.host, r2.digest));
    assert_eq!(e["previous"]["digest"], r1.digest);
    assert_eq!(e["current"]["digest"], r2.digest);

    // A builder republished on the moved run image: a rebase, naming the run image's new digest.
    let mut patched = BuilderSpec::jammy(&run);
    patched.base[0] = "sha256:build-jammy-base-2".into();
    push(&pusher, "paketo/builder-base", "latest", &[patched]).await;
    assert!(s.monitor.run_once().await);
    let events = self::events(&s.ledger).await;
    let builder_change = events.iter().rfind(|e| e.event_type == EventType::BuilderChanged).unwrap();
    let change = builder_change.change.as_ref().unwrap();
    assert_eq!(change.kind.as_str(), "rebase");
    assert_eq!(
        change.run_image.as_ref().unwrap().to.as_deref(),
        Some(format!("{}/paketo/run-jammy-base@{}", proxy.host, r2.digest).as_str())
    );

    // status shows the run image and who uses it.
    let status = builder_monitor::status::collect(s.monitor.config(), &s.ledger, 10).await.unwrap();
    assert_eq!(status.run_images.len(), 1);
    assert_eq!(status.run_images[0].builders, ["base", "full"]);
    assert_eq!(status.run_images[0].changes.len(), 1);
    assert_eq!(status.builders[0].run_image.as_deref(), Some(run.as_str()));
}

#[tokio::test]
async fn app_images_are_read_from_their_lifecycle_labels() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let run_digest = format!("sha256:{}", "c".repeat(64));
    let lifecycle = serde_json::json!({
        "runImage": { "image": "docker.io/paketobuildpacks/run-jammy-base:latest", "topLayer": "sha256:top",
                      "reference": format!("docker.io/paketobuildpacks/run-jammy-base@{run_digest}") },
        "buildpacks": [{ "key": "paketo-buildpacks/java", "version": "18.1.0" }],
    });
    let build = serde_json::json!({ "buildpacks": [{ "id": "paketo-buildpacks/java", "version": "18.1.0" }], "launcher": { "version": "0.21.13" } });
    let app = Image::new("amd64")
        .label("io.buildpacks.lifecycle.metadata", lifecycle.to_string())
        .label("io.buildpacks.build.metadata", build.to_string())
        .label("io.buildpacks.stack.id", "io.buildpacks.stacks.jammy");
    let pushed = pusher.push_index("apps/petclinic", "latest", &[app, Image::new("arm64")], Format::Oci).await.0;
    let reg = Registry::new(Vec::new(), builder_monitor::metrics::Metrics::new());
    let image =
        builder_monitor_core::reference::ImageRef::parse(&format!("{}/apps/petclinic:latest", registry.host)).unwrap();
    let found = builder_monitor::inspect::app_metadata(&reg, &image, 16).await.unwrap().unwrap();
    assert_eq!(found.digest, pushed.digest);
    let metadata = found.metadata.unwrap().unwrap();
    assert_eq!(metadata.run_image_digest(), Some(run_digest.as_str()));
    assert_eq!(metadata.launcher_version.as_deref(), Some("0.21.13"));
    assert_eq!(metadata.buildpacks[0].id, "paketo-buildpacks/java");

    let missing =
        builder_monitor_core::reference::ImageRef::parse(&format!("{}/apps/none:latest", registry.host)).unwrap();
    assert!(
        builder_monitor::inspect::app_metadata(&reg, &missing, 16).await.unwrap().is_none(),
        "an app not built yet"
    );
}

#[tokio::test]
async fn builders_pinned_together_share_one_head_of_their_run_image() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let proxy = Proxy::start(&registry.host).await;
    // The builders name the run image through the proxy, so its HEADs can be counted.
    let run = format!("{}/paketo/run-jammy-base:latest", proxy.host);
    let r1 = pusher.push_image("paketo/run-jammy-base", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    push(&pusher, "paketo/builder", "latest", &[BuilderSpec::jammy(&run)]).await;
    let mut text = String::from("[monitor]\nstate = \"x.db\"\n");
    for i in 0..20 {
        text += &format!("[[builders]]\nname = \"b{i:02}\"\nimage = \"{}/paketo/builder:latest\"\n", registry.host);
    }
    let s = setup(&text);
    let mut checks = tokio::task::JoinSet::new();
    for i in 0..20 {
        let monitor = s.monitor.clone();
        checks.spawn(async move { monitor.check_builder(&format!("b{i:02}")).await.unwrap().unwrap() });
    }
    while let Some(outcome) = checks.join_next().await {
        assert!(matches!(outcome.unwrap(), builder_monitor::monitor::CheckOutcome::Pinned { .. }));
    }
    let heads = proxy.seen().iter().filter(|r| r.method == "HEAD" && r.path.contains("/run-jammy-base/")).count();
    assert_eq!(heads, 1, "twenty builders pinned, one HEAD of their run image: {:#?}", proxy.seen());
    for i in 0..20 {
        let pinned = s.ledger.watch(&format!("b{i:02}")).await.unwrap().unwrap().pinned_metadata().unwrap();
        let reference = pinned.run_image.unwrap().reference.unwrap();
        assert_eq!(reference, format!("{}/paketo/run-jammy-base@{}", proxy.host, r1.digest));
    }
}

//! What a hostile image costs the daemon, measured on the real binary against a real registry: an
//! index listing one manifest 200 times, and an SBOM layer of 20 million empty components (60 KB of
//! gzip). Each command's peak resident set comes from the kernel's accounting of that one child
//! (`wait4`), and the watch's ledger entry is read back whole.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use crate::support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use builder_monitor::config::Config;
use builder_monitor::ledger::Ledger;
use builder_monitor_core::reference::ImageRef;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::app::{Layer, RunImage, gzip, push_run, tar};
use support::cnb::BuilderSpec;
use support::daemon::{BINARY, Output, Workspace};
use support::images::{Format, Pusher, sha256};
use support::proxy::Proxy;
use support::registry::TestRegistry;

#[path = "bounded/osv_big.rs"]
mod osv_big;
#[path = "bounded/osv_zip.rs"]
mod osv_zip;

/// The most any command may hold resident, in KiB. The daemon itself starts at ~15 MiB.
const PEAK_RSS_KIB: u64 = 64 << 10;
/// The most a watch's ledger entry may take, in bytes (a ConfigMap holds 1 MiB).
const LEDGER_ENTRY_BYTES: usize = 1 << 20;
/// How long a measured command may run before it is killed (it fails the test then): generous,
/// since the unbounded reading this guards against takes minutes and gigabytes.
const WATCHDOG: Duration = Duration::from_secs(300);

/// Set in the helper process [`measure_helper`] runs as: the arguments of the command to measure.
const HELPER_ARGS: &str = "BOUNDED_MEASURE_ARGS";

/// Runs the binary to completion: its output and its peak resident set in KiB. The kernel's
/// `ru_maxrss` of a child starts from the RSS of the process that spawned it (the exec'ing memory
/// is the spawner's), so this test process, which holds images and proxies, cannot spawn it
/// itself: a fresh copy of this test binary running only [`measure_helper`] does, from ~10 MiB.
async fn measured(args: &[&str], cwd: &Path) -> (Output, u64) {
    let args = serde_json::to_string(args).unwrap();
    let cwd = cwd.to_path_buf();
    // The helper's test name: its path in this binary (`bounded::measure_helper` in a grouped one).
    let name = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::measure_helper"),
        None => "measure_helper".to_string(),
    };
    let helper = tokio::task::spawn_blocking(move || {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &name, "--nocapture", "--test-threads=1", "--quiet"])
            .env(HELPER_ARGS, args)
            .current_dir(cwd)
            .output()
            .expect("start the measuring helper")
    });
    let helper = helper.await.unwrap();
    let stdout = String::from_utf8_lossy(&helper.stdout);
    let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("MEASURED ")) else {
        panic!("the helper measured nothing: {stdout}\n{}", String::from_utf8_lossy(&helper.stderr));
    };
    let measured: Value = serde_json::from_str(line).unwrap();
    let text = |key: &str| measured[key].as_str().unwrap().to_string();
    let code = measured["code"].as_i64().map(|c| c as i32);
    (Output { code, stdout: text("stdout"), stderr: text("stderr") }, measured["peak"].as_u64().unwrap())
}

/// Not a test of its own: in the helper process [`measured`] starts, runs the command named by
/// `BOUNDED_MEASURE_ARGS` and prints its outcome and peak; otherwise does nothing.
#[test]
fn measure_helper() {
    let Ok(args) = std::env::var(HELPER_ARGS) else { return };
    let args: Vec<String> = serde_json::from_str(&args).unwrap();
    let (output, peak) = run_measured(&args, &std::env::current_dir().unwrap());
    let report = json!({"code": output.code, "stdout": output.stdout, "stderr": output.stderr, "peak": peak});
    println!("MEASURED {report}");
}

/// Spawns the binary, reaps it with `wait4` and returns its output and `ru_maxrss` (KiB on Linux).
fn run_measured(args: &[String], cwd: &Path) -> (Output, u64) {
    #[expect(clippy::zombie_processes, reason = "reaped by wait4 below, which also gives its rusage")]
    let mut child = Command::new(BINARY)
        .args(args)
        .current_dir(cwd)
        .env("BUILDER_MONITOR_LOG", "warn,builder_monitor::vulns=info")
        .env_remove("BUILDER_MONITOR_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start builder-monitor");
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let pid = child.id() as libc::pid_t;
    let (done, exited) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if exited.recv_timeout(WATCHDOG).is_err() {
            // SAFETY: a plain signal to our own child, not yet reaped (the wait below reaps it).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let mut status = 0;
    // SAFETY: rusage is plain data the kernel fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let _ = done.send(());
    watchdog.join().unwrap();
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let output = Output { code, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() };
    (output, usage.ru_maxrss as u64)
}

fn json_of(output: &Output) -> Value {
    serde_json::from_str(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}\n{}", output.stdout, output.stderr))
}

/// A builder whose config is ~0.5 MB: 1,200 buildpacks (Paketo's largest builders list ~60), each in
/// the metadata, layers and order labels and with its own layer.
fn big_builder(run_image: &str) -> BuilderSpec {
    let mut spec = BuilderSpec::jammy(run_image);
    spec.buildpacks = (0..1_200)
        .map(|i| {
            (format!("paketo-buildpacks/example-buildpack-{i:05}"), "1.0.0".to_string(), format!("sha256:{i:064x}"))
        })
        .collect();
    spec.order = spec.buildpacks.iter().map(|b| b.0.clone()).collect();
    spec
}

const CUT: &str = "index lists 200 entries; read the first 16 distinct platforms, 184 ignored (160 duplicates, 24 over max_platforms = 16)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_listing_one_manifest_200_times_is_read_once_and_kept_small() {
    let registry = TestRegistry::start();
    let proxy = Proxy::start(&registry.host).await;
    let pusher = Pusher::new(&registry.host);
    let image = big_builder(&format!("{}/paketo/run:latest", proxy.host)).image();
    let child = pusher.push_image("paketo/big", None, &image, Format::Oci).await;
    // One manifest listed 200 times, under 40 platforms (amd64 first): 40 distinct entries, 160
    // duplicates, and 24 of the distinct ones over the default max_platforms of 16.
    let entries: Vec<Value> = (0..200)
        .map(|i| {
            let arch = if i % 40 == 0 { "amd64".to_string() } else { format!("arch{:02}", i % 40) };
            json!({"mediaType": child.media_type, "digest": child.digest, "size": child.size,
                   "platform": {"os": "linux", "architecture": arch}})
        })
        .collect();
    let index =
        serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": Format::Oci.index(), "manifests": entries}))
            .unwrap();
    pusher.push_raw("paketo/big", "latest", vec![], index, Format::Oci.index()).await;
    let tag = format!("{}/paketo/big:latest", proxy.host);

    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n[[builders]]\nname = \"big\"\nimage = \"{tag}\"\nwatch_run_image = false\n"
    ));
    let config = config.to_str().unwrap();
    let (out, peak) = measured(&["run", "--once", "--config", config], ws.dir.path()).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(peak < PEAK_RSS_KIB, "run --once peaked at {peak} KiB");
    // The manifest and its config are fetched once, whatever the index lists.
    let gets = |what: &str| proxy.seen().iter().filter(|s| s.method == "GET" && s.path.ends_with(what)).count();
    assert_eq!((gets(&child.digest), gets(&child.config_digest)), (1, 1), "{:#?}", proxy.seen());

    let ledger = Ledger::open_read_only(&ws.path("state.db")).unwrap();
    let record = ledger.watch("big").await.unwrap().unwrap();
    let entry = serde_json::to_vec(&record).unwrap().len();
    assert!(entry < LEDGER_ENTRY_BYTES, "the watch's ledger entry is {entry} bytes");
    let pin = record.pin.as_ref().unwrap();
    assert_eq!(pin.platforms.len(), 16);
    let metadata = serde_json::to_value(record.metadata.as_ref().unwrap()).unwrap();
    assert_eq!(metadata["notes"][0], CUT, "{}", metadata["notes"]);
    // The preferred platform's metadata is kept; what did not fit the pin's budget is a note.
    assert_eq!(metadata["platforms"]["linux/amd64"]["status"], "builder");
    let cut = metadata["platforms"].as_object().unwrap().values().filter(|p| p["status"] == "unreadable").count();
    let notes = metadata["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 2, "{notes:?}");
    let kept = "not kept, over the 524288 bytes of JSON a pin keeps: the CNB metadata of linux/arch01, linux/arch02";
    assert!(notes[1].as_str().unwrap().starts_with(kept), "{notes:?}");
    println!("run --once: peak {peak} KiB, ledger entry {entry} bytes, {cut} platforms' metadata not kept");

    // `status` shows the note, as do `resolve` and `diff`, which read the same bounded way.
    let status = ws.run(&["status", "--json", "--config", config]);
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    assert_eq!(json_of(&status)["builders"][0]["notes"][0], CUT);
    let (out, peak) = measured(&["resolve", "--json", &tag], ws.dir.path()).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(peak < PEAK_RSS_KIB, "resolve peaked at {peak} KiB");
    let resolved = json_of(&out);
    assert_eq!(resolved["notes"][0], CUT);
    assert_eq!(resolved["platforms"].as_array().unwrap().len(), 16);
    let (out, peak) = measured(&["diff", "--json", &tag, &tag], ws.dir.path()).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(peak < PEAK_RSS_KIB, "diff peaked at {peak} KiB");
    let change = json_of(&out);
    assert_eq!(change["notes"][0], format!("old image: {CUT}"));
    assert!(change["notes"].as_array().unwrap().contains(&json!(format!("new image: {CUT}"))), "{change}");
    println!("resolve, diff: peak {peak} KiB");
}

/// A gzip tar layer holding `cnb/sbom/bom.cdx.json` with `n` empty components: 3 bytes each
/// unpacked, generated as it is compressed so the test never holds it either.
fn empty_components_layer(n: usize) -> Layer {
    let (open, close) = (br#"{"bomFormat":"CycloneDX","components":["#.as_slice(), b"{}]}".as_slice());
    let chunk = "{},".repeat(100_000);
    assert_eq!((n - 1) % 100_000, 0);
    let size = open.len() + (n - 1) / 100_000 * chunk.len() + close.len();
    let mut header = tar::Header::new_ustar();
    header.set_path("cnb/sbom/bom.cdx.json").unwrap();
    header.set_size(size as u64);
    header.set_mode(0o644);
    header.set_mtime(0);
    header.set_cksum();
    let mut diff_id = Sha256::new();
    let mut blob = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut write = |bytes: &[u8]| {
        diff_id.update(bytes);
        blob.write_all(bytes).unwrap();
    };
    write(header.as_bytes());
    write(open);
    for _ in 0..(n - 1) / 100_000 {
        write(chunk.as_bytes());
    }
    write(close);
    write(&vec![0; size.next_multiple_of(512) - size + 1024]);
    let blob = blob.finish().unwrap();
    let diff_id = format!("sha256:{}", hex::encode(diff_id.finalize()));
    Layer { digest: sha256(&blob), diff_id, blob, created_by: "SBOM".into() }
}

/// A run image whose last layer is `sbom`, named by `io.buildpacks.base.sbom`.
fn run_with_sbom(version: &str, sbom: Layer) -> RunImage {
    let mut run = RunImage::jammy(version, 1);
    run.layers.push(sbom);
    let top = run.top_diff_id();
    run.label("io.buildpacks.base.sbom", &top)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sbom_of_20_million_empty_components_is_cut_at_the_cap() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let bomb = empty_components_layer(20_000_001);
    assert!(bomb.blob.len() < 256 << 10, "{} bytes of gzip", bomb.blob.len());
    let sane = br#"{"components":[{"name":"openssl","version":"3.0.2-0ubuntu1.15"}]}"#;
    let sane = tar("cnb/sbom/bom.cdx.json", sane);
    let sane = Layer { blob: gzip(&sane), diff_id: sha256(&sane), digest: String::new(), created_by: "SBOM".into() };
    let sane = Layer { digest: sha256(&sane.blob), ..sane };
    push_run(&pusher, "paketo/run", Some("1"), &run_with_sbom("1", sane), Format::Oci).await;
    let bomb = push_run(&pusher, "paketo/run", Some("2"), &run_with_sbom("2", bomb), Format::Oci).await;
    let run = |tag: &str| format!("{}/paketo/run:{tag}", registry.host);
    let cut = |digest: &str| {
        format!(
            "the package list of {}/paketo/run@{digest} was cut at 5000 entries (the most read of a list): packages beyond them are not compared",
            registry.host
        )
    };

    let ws = Workspace::new();
    let (out, peak) = measured(&["diff", "--json", &run("1"), &run("2")], ws.dir.path()).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(peak < PEAK_RSS_KIB, "diff peaked at {peak} KiB");
    let change = json_of(&out);
    assert_eq!(change["kind"], "rebase");
    assert_eq!(change["packages_note"], cut(&bomb.digest), "{change}");
    // None of its 5,000 read entries names a package: openssl is not called removed.
    assert_eq!(change["packages"]["removed"], json!([]), "{change}");
    println!("diff: peak {peak} KiB");

    // The daemon's run image watch reads it the same way, and keeps the note with the pin.
    let builder = BuilderSpec::jammy(&run("2")).image();
    pusher.push_image("paketo/builder", Some("latest"), &builder, Format::Oci).await;
    let text = format!(
        "[monitor]\nstate = \"state.db\"\n\n[[builders]]\nname = \"b\"\nimage = \"{}/paketo/builder:latest\"\n",
        registry.host
    );
    let config = ws.config(&text);
    Config::parse(&config, &text).expect("a valid config");
    let (out, peak) = measured(&["run", "--once", "--config", config.to_str().unwrap()], ws.dir.path()).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(peak < PEAK_RSS_KIB, "run --once peaked at {peak} KiB");
    let ledger = Ledger::open_read_only(&ws.path("state.db")).unwrap();
    let watch = format!("run:{}", ImageRef::parse(&run("2")).unwrap());
    let record = ledger.watch(&watch).await.unwrap().unwrap();
    let kept = &serde_json::to_value(record.metadata.as_ref().unwrap()).unwrap()["packages"]["linux/amd64"];
    assert_eq!((&kept["status"], &kept["cut_at"]), (&json!("listed"), &json!(5000)), "{kept}");
    let notes = &serde_json::to_value(record.metadata.as_ref().unwrap()).unwrap()["notes"];
    assert_eq!(notes, &json!([cut(&bomb.digest)]), "the pin says so");
    println!("run --once: peak {peak} KiB");
}

#[test]
fn max_platforms_is_configurable_and_range_checked() {
    let parse = |monitor: &str| {
        let text = format!("[monitor]\n{monitor}\n[[builders]]\nname = \"b\"\nimage = \"r.example.com/b:1\"\n");
        Config::parse(Path::new("/etc/bm/config.toml"), &text)
    };
    assert_eq!(parse("").unwrap().monitor.max_platforms, 16);
    assert_eq!(parse("max_platforms = 4").unwrap().monitor.max_platforms, 4);
    assert_eq!(parse("max_platforms = 256").unwrap().monitor.max_platforms, 256);
    for bad in ["0", "257", "-1"] {
        let error = parse(&format!("max_platforms = {bad}")).unwrap_err().to_string();
        assert_eq!(error, "/etc/bm/config.toml:2:17: max_platforms must be between 1 and 256", "{bad}");
    }
    let error = parse("max_platforms = \"16\"").unwrap_err().to_string();
    assert!(error.starts_with("/etc/bm/config.toml:2:17: "), "{error}");
}

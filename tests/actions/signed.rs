//! `require_signed` through the built binary against the real registry: a run-image move rebases
//! only the app a trusted key signed (and our key signs what it wrote); an unsigned app, one signed
//! by another key and ones with hostile `.sig` manifests (17 layers, a payload over 1 MiB, a payload
//! that is no JSON) are refused with their reason, their tags untouched, `action.refused` delivered
//! to a real webhook listener. Keys are made by the `openssl` program.

use crate::support;

use bytes::Bytes;
use serde_json::{Value, json};

use builder_monitor::ledger::Ledger;
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{Descriptor, SIMPLE_SIGNING_MEDIA_TYPE, Signer};
use support::app::{self, App, RunImage};
use support::cnb::BuilderSpec;
use support::daemon::Workspace;
use support::images::{Format, Pusher};
use support::receiver::Receiver;
use support::registry::TestRegistry;

const APPS: [&str; 6] = ["good", "bare", "other", "many", "huge", "junk"];
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// A P-256 key made by openssl, and its public key beside it (`NAME.pub`).
fn key(ws: &Workspace, name: &str) -> Signer {
    support::keys::p256(ws.dir.path(), name)
}

fn client() -> Registry {
    builder_monitor::install_crypto_provider();
    Registry::new([], Metrics::new())
}

/// A `.sig` manifest for `digest` of `layers` simple-signing layers, each over `payload`.
async fn hostile_sig(registry: &Registry, image: &ImageRef, digest: &str, layers: usize, payload: Bytes) {
    let sha = builder_monitor::registry::sha256_digest;
    registry.put_blob(image, Bytes::from_static(b"{}")).await.unwrap();
    registry.put_blob(image, payload.clone()).await.unwrap();
    let layer = json!({
        "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
        "digest": sha(&payload),
        "size": payload.len(),
        "annotations": { "dev.cosignproject.cosign/signature": "MEUCIQDnotasignature" },
    });
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": { "mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(b"{}"), "size": 2 },
        "layers": vec![layer; layers],
    });
    let tag = format!("{}.sig", digest.replace(':', "-"));
    registry.put_manifest(image, &tag, OCI_MANIFEST, Bytes::from(manifest.to_string())).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_app_a_trusted_key_signed_is_rebased_and_the_rest_are_refused() {
    let registry = TestRegistry::start();
    let host = registry.host.clone();
    let pusher = Pusher::new(&host);
    let ws = Workspace::new();
    let ours = key(&ws, "own.pem");
    let kpack = key(&ws, "kpack.pem");
    let stranger = key(&ws, "stranger.pem");

    let run_tag = format!("{host}/demo/run:latest");
    let run_v1 = RunImage::jammy("1", 3);
    let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
    let built = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest));
    let client = client();
    let mut before = std::collections::BTreeMap::new();
    let mut images = String::new();
    for name in APPS {
        let digest = app::push_app(&pusher, &format!("apps/{name}"), Some("latest"), &built, Format::Oci).await.digest;
        let image = ImageRef::parse(&format!("{host}/apps/{name}:latest")).unwrap();
        let manifest = client.get_manifest(&image, &digest).await.unwrap();
        let subject = Descriptor::of(&manifest.media_type, &manifest.bytes);
        let sign = |signer| builder_monitor::signing::sign(&client, &image, &subject, signer, None, chrono::Utc::now());
        match name {
            "good" => drop(sign(&kpack).await.unwrap()),
            "other" => drop(sign(&stranger).await.unwrap()),
            "many" => hostile_sig(&client, &image, &digest, 17, Bytes::from_static(b"{}")).await,
            "huge" => hostile_sig(&client, &image, &digest, 1, Bytes::from(vec![b' '; (1 << 20) + 1])).await,
            "junk" => hostile_sig(&client, &image, &digest, 1, Bytes::from_static(b"\x00not json at all")).await,
            _ => {}
        }
        before.insert(name, digest);
        images.push_str(&format!(
            "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{name}:latest\"\npolicy = \"rebase\"\n\n"
        ));
    }
    let receiver = Receiver::start().await;
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n{images}\
         [runner]\ntype = \"none\"\nrebase = \"registry\"\nmax_concurrent = 2\n\n\
         [signing]\nkey = \"own.pem\"\ntrusted_keys = [\"kpack.pem.pub\"]\nrequire_signed = true\n\n\
         [[alerts]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\nevents = [\"action.refused\"]\nbackoff = \"100ms\"\n",
        receiver.url
    ));
    let config = config.to_str().unwrap();
    let out = ws.run(&["run", "--once", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    app::push_run(&pusher, "demo/run", Some("latest"), &RunImage::jammy("2", 4), Format::Oci).await;
    let out = ws.run(&["run", "--once", "--config", config]);
    assert_eq!(out.code, Some(1), "the refusals are failures: {}", out.stderr);

    let now = |name: &str| {
        let image = ImageRef::parse(&format!("{host}/apps/{name}:latest")).unwrap();
        let client = &client;
        async move { client.head_manifest(&image).await.unwrap().digest }
    };
    let rebased = now("good").await;
    assert_ne!(rebased, before["good"], "the app the trusted key signed was rebased");
    for name in &APPS[1..] {
        assert_eq!(now(name).await, before[name], "{name}: refused, its tag untouched");
    }

    let ledger = Ledger::open_read_only(&ws.path("state.db")).unwrap();
    let events: Vec<Value> = ledger
        .events_after(0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| serde_json::to_value(&e.event).unwrap())
        .collect();
    let of = |t: &str, image: &str| {
        events.iter().find(|e| e["type"] == t && e["action"]["image"] == image).cloned().unwrap_or_else(|| {
            panic!("no {t} of {image}: {events:#?}");
        })
    };
    let succeeded = of("rebase.succeeded", "good");
    let signature = &succeeded["action"]["signature"];
    assert_eq!(signature["digest"], rebased.as_str(), "{succeeded:#}");
    assert_eq!(signature["key_id"], ours.key_id(), "re-signed by our key: {succeeded:#}");
    assert!(signature["signature"].as_str().unwrap().starts_with("sha256:"), "{succeeded:#}");
    assert!(signature["attestation"].as_str().unwrap().starts_with("sha256:"), "{succeeded:#}");
    let verified = &signature["verified"];
    assert_eq!((&verified["digest"], &verified["verdict"]), (&json!(before["good"]), &json!("signed")));
    assert_eq!(verified["key_id"], kpack.key_id());

    for (name, reason) in [
        ("bare", "unsigned"),
        ("other", "signature_invalid"),
        ("many", "signature_invalid"),
        ("huge", "signature_invalid"),
        ("junk", "signature_invalid"),
    ] {
        let refused = of("action.refused", name);
        let detail = refused["action"]["detail"].as_str().unwrap();
        assert!(detail.starts_with(&format!("{reason}: refused to act on {}", before[name])), "{name}: {detail}");
        assert!(detail.contains("kpack.pem.pub") && detail.contains("own key"), "the keys tried: {detail}");
        assert_eq!(refused["action"]["signature"]["verified"]["verdict"], reason, "{refused:#}");
        assert!(!events.iter().any(|e| e["type"] == "rebase.failed" && e["action"]["image"] == name), "{name}");
    }
    let many = of("action.refused", "many")["action"]["detail"].as_str().unwrap().to_string();
    assert!(many.contains("16"), "the layer bound named: {many}");
    let huge = of("action.refused", "huge")["action"]["detail"].as_str().unwrap().to_string();
    assert!(huge.contains("1024 KiB"), "the size bound named: {huge}");

    // `status` says which key signed each app's current digest, and what the newest action wrote.
    let out = ws.run(&["status", "--json", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let status: Value = serde_json::from_str(&out.stdout).unwrap();
    let image = |name: &str| status["images"].as_array().unwrap().iter().find(|i| i["name"] == name).unwrap().clone();
    let good = image("good");
    assert_eq!((&good["signed"], &good["signature"]), (&json!(ours.key_id()), &signature["signature"]), "{good:#}");
    assert_eq!(good["attestation"], signature["attestation"], "{good:#}");
    let bare = image("bare");
    assert_eq!((&bare["signed"], &bare["unsigned"], &bare["signature"]), (&Value::Null, &json!(true), &Value::Null));
    let out = ws.run(&["status", "--config", config]);
    assert!(out.stdout.contains(&format!("signed by {}", &ours.key_id()[..12])), "{}", out.stdout);

    // The webhook heard of each refusal.
    let delivered = receiver.wait_for(5).await;
    let mut heard: Vec<String> = delivered
        .iter()
        .map(|r| r.json())
        .inspect(|e| assert_eq!(e["type"], "action.refused", "{e:#}"))
        .map(|e| e["action"]["image"].as_str().unwrap().to_string())
        .collect();
    heard.sort();
    assert_eq!(heard, ["bare", "huge", "junk", "many", "other"]);
}

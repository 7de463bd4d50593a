//! `require_signed` on deploys, through the built binary, the real registry and the Kubernetes API
//! double: a deploy by hand of a digest no trusted key signed is refused (`unsigned:`,
//! `action.refused`) and leaves the Deployment as it was; one of a digest the trusted key signed
//! rolls out. Keys are made by the `openssl` program.

use super::*;

use support::images::Image;
use support::keys;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_of_a_digest_no_trusted_key_signed_is_refused_and_a_signed_one_goes_through() {
    let keys_dir = tempfile::tempdir().unwrap();
    keys::p256(keys_dir.path(), "own.pem");
    let kpack = keys::p256(keys_dir.path(), "kpack.pem");
    let extra = format!(
        "[signing]\nkey = \"{0}/own.pem\"\ntrusted_keys = [\"{0}/kpack.pem.pub\"]\nrequire_signed = true\n",
        keys_dir.path().display()
    );
    let w = World::deploying_app(&[("canary", 0, &[("shop", "canary")])], &extra).await;
    let before = w.running("canary");
    assert_eq!(before, w.reference("canary", &w.built("canary")));
    let generation =
        |w: &World| w.kube.workload("Deployment", "shop", "canary").unwrap()["metadata"]["generation"].clone();
    let written = generation(&w);

    // Two more builds of the app in its repository: one nobody signed, one the trusted key signed.
    let push = |salt: &'static str| {
        let pusher = &w.pusher;
        async move { pusher.push_image("apps/canary", Some(salt), &Image::new("amd64").salt(salt), Format::Oci).await }
    };
    let unsigned = push("unsigned").await.digest;
    let signed = push("signed").await.digest;
    builder_monitor::install_crypto_provider();
    let client = Registry::new([], Metrics::new());
    let image = ImageRef::parse(&format!("{}/apps/canary:latest", w.host)).unwrap();
    keys::sign(&client, &image, &signed, &kpack).await;

    let out = w.cli(&["deploy", "canary", "--to", &unsigned]);
    assert_eq!(out.code, Some(0), "recorded for the daemon: {}", out.stderr);
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(1), "the refusal is a failure: {}", out.stderr);
    let deploy = w.deploy_of("canary").await;
    assert_eq!(deploy.state, ActionState::Failed, "{deploy:?}");
    let detail = deploy.detail.clone().unwrap_or_default();
    assert!(detail.starts_with(&format!("unsigned: refused to act on {unsigned}")), "{detail}");
    assert!(detail.contains("kpack.pem.pub") && detail.contains("own key"), "the keys tried: {detail}");
    let events = w.events().await;
    let refused: Vec<_> = events.iter().filter(|(t, i, _)| t == "action.refused" && i == "canary").collect();
    assert_eq!(refused.len(), 1, "{events:#?}");
    assert_eq!(refused[0].2["action"]["kind"], "deploy", "{:#}", refused[0].2);
    assert_eq!(refused[0].2["action"]["signature"]["verified"]["verdict"], "unsigned", "{:#}", refused[0].2);
    assert_eq!(w.count("deploy.started", "canary").await, 0, "nothing was written");
    assert_eq!(w.running("canary"), before, "the Deployment still runs what it ran");
    assert_eq!(generation(&w), written, "its template was not written");

    let out = w.cli(&["deploy", "canary", "--to", &signed]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(w.running("canary"), w.reference("canary", &signed), "the signed digest rolled out");
    let succeeded = w.events().await.into_iter().find(|(t, i, _)| t == "deploy.succeeded" && i == "canary");
    let (_, _, succeeded) = succeeded.unwrap_or_else(|| panic!("no deploy.succeeded of canary"));
    let verified = &succeeded["action"]["signature"]["verified"];
    assert_eq!((&verified["digest"], &verified["verdict"]), (&serde_json::json!(signed), &serde_json::json!("signed")));
    assert_eq!(verified["key_id"], kpack.key_id(), "{succeeded:#}");
}

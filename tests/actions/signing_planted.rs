//! A `.sig` planted for the digest a rebase is about to write (anyone who can push to the app's
//! repository can compute it: `rebase --dry-run` prints it) does not block the rebase: the daemon
//! replaces it with a fresh signature manifest, moves the tag, and raises `signature.replaced`
//! naming the planted manifest.

use crate::signing::{PASSWORD, PASSWORD_ENV, PUBLIC_KEY, World, client, fixture, valid_signatures};
use crate::support;

use bytes::Bytes;
use serde_json::{Value, json};

use builder_monitor::ledger::Ledger;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_index_under_the_next_digests_sig_is_replaced_and_raised() {
    let world = World::with("[runner]\ntype = \"none\"\nrebase = \"registry\"\nmax_attempts = 1\n", "").await;
    let tag = world.tag();
    world.move_run_image().await;
    let config = world.config.to_str().unwrap();
    let run_image = format!("{}/demo/run:latest", world.host);
    let args = ["rebase", &tag.to_string(), "--run-image", &run_image, "--dry-run", "--json", "--config", config];
    let dry = support::daemon::run_with_env(&args, &[(PASSWORD_ENV, PASSWORD)], world.ws.dir.path());
    assert_eq!(dry.code, Some(0), "{}", dry.stderr);
    let dry: Value = serde_json::from_str(&dry.stdout).unwrap();
    let next = dry["signing"]["digests"][0].as_str().unwrap().to_string();

    // An index under the `.sig` tag of the digest the rebase will write, naming the app as it is.
    let current = client().get_manifest(&tag, "latest").await.unwrap();
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{ "mediaType": current.media_type, "digest": current.digest, "size": current.bytes.len() }],
    });
    let sig_tag = format!("{}.sig", next.replace(':', "-"));
    let index = Bytes::from(serde_json::to_vec(&index).unwrap());
    let planted =
        client().put_manifest(&tag, &sig_tag, "application/vnd.oci.image.index.v1+json", index).await.unwrap();

    let out = world.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(client().head_manifest(&tag).await.unwrap().digest, next, "rebased and tagged");
    let sig = client().get_manifest(&tag, &sig_tag).await.unwrap();
    assert_eq!(sig.media_type, "application/vnd.oci.image.manifest.v1+json", "a fresh image manifest");
    assert_eq!(valid_signatures(&tag, &next, &fixture(PUBLIC_KEY)).await, 1, "ours verifies");

    let ledger = Ledger::open_read_only(&world.ws.path("state.db")).unwrap();
    let events: Vec<Value> = ledger
        .events_after(0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| serde_json::to_value(&e.event).unwrap())
        .collect();
    let raised = events.iter().find(|e| e["type"] == "signature.replaced").unwrap_or_else(|| panic!("{events:#?}"));
    let detail = raised["action"]["detail"].as_str().unwrap();
    assert!(detail.contains(&sig_tag) && detail.contains(&planted), "names the planted object: {detail}");
    assert!(detail.contains("not an OCI image manifest"), "{detail}");
}

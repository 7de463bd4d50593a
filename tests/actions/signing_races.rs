//! `require_signed` under a tag move: the app tag holds a digest a trusted key signed, and right
//! after the daemon's signature check reads that signature, someone moves the tag to an image
//! nobody signed. Neither the registry rebase nor a runner's command (`[signing] builds`) may then
//! rebase, sign or tag the unsigned image: the attempt fails naming both digests, and the tag keeps
//! what the mover put there. The move is made by a proxy between the daemon and the real registry,
//! as the answer to the `.sig` read goes back.

use crate::signing::{World, client};
use crate::support;

use builder_monitor::ledger::Ledger;
use builder_monitor_core::reference::ImageRef;
use support::app::{self, App, RunImage};
use support::images::Format;
use support::proxy::Trap;

/// A signing world whose app digest the key `ci.key` (trusted) signed, under `require_signed`;
/// with the `[runner]` tables `runner` and more `[signing]` lines `signing`. Answers the world, the
/// signed digest, and an unsigned image of the app pushed by digest only (the one the tag will be
/// moved to).
async fn signed_world(runner: &str, signing: &str) -> (World, tempfile::TempDir, String, String) {
    let keys = tempfile::tempdir().unwrap();
    let ci = support::keys::p256(keys.path(), "ci.key");
    let trusted =
        format!("trusted_keys = [\"{}\"]\nrequire_signed = true\n{signing}", keys.path().join("ci.key.pub").display());
    let world = World::with(runner, &trusted).await;
    let tag = world.tag();
    let signed = client().head_manifest(&tag).await.unwrap().digest;
    support::keys::sign(&client(), &tag, &signed, &ci).await;

    // The same app with another label: an image nobody signed, rebasable as the signed one is.
    let run_v1 = RunImage::jammy("1", 3);
    let run_tag = format!("{}/demo/run:latest", world.host);
    let run = app::push_run(&world.pusher, "demo/run", None, &run_v1, Format::Oci).await;
    let planted = App::on(&run_v1, &run_tag, &format!("{}/demo/run@{}", world.host, run.digest)).label("planted", "1");
    let unsigned = app::push_app(&world.pusher, "apps/web", None, &planted, Format::Oci).await.digest;
    assert_ne!(unsigned, signed);
    (world, keys, signed, unsigned)
}

/// Moves the app tag (in the registry itself, not through the proxy) to `unsigned` right after the
/// first read of `signed`'s `.sig` is answered by the registry.
async fn move_tag_after_the_signature_check(world: &World, signed: &str, unsigned: &str) {
    let direct = ImageRef::parse(&format!("{}/apps/web:latest", world.registry.host())).unwrap();
    let manifest = client().get_manifest(&direct, unsigned).await.unwrap();
    let sig = format!("{}.sig", signed.replace(':', "-"));
    world.proxy.trap(Trap::after("GET", &sig, move || {
        let (direct, manifest) = (direct.clone(), manifest.clone());
        async move {
            client()
                .put_manifest(&direct, "latest", &manifest.media_type, manifest.bytes.clone())
                .await
                .expect("the tag moves to the unsigned image");
        }
    }));
}

/// What the world's registry holds under `apps/web`: every tag.
async fn tags(world: &World) -> Vec<String> {
    let url = format!("http://{}/v2/apps/web/tags/list", world.registry.host());
    let listed: serde_json::Value = support::http().get(url).send().await.unwrap().json().await.unwrap();
    listed["tags"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
}

/// The outcome every variant must end in: the tag on the unsigned image as its mover left it, no
/// tag write or signature of ours, and one failed action naming both digests.
async fn assert_untouched(world: &World, signed: &str, unsigned: &str) {
    assert_eq!(client().head_manifest(&world.tag()).await.unwrap().digest, unsigned, "the mover's tag stays");
    let seen = world.proxy.seen();
    let puts: Vec<&str> = seen.iter().filter(|s| s.method == "PUT").map(|s| s.path.as_str()).collect();
    assert!(!puts.iter().any(|p| p.ends_with("/manifests/latest")), "no tag write of ours: {puts:?}");
    assert!(!puts.iter().any(|p| p.contains(".sig") || p.contains(".att")), "nothing signed: {puts:?}");
    // Only the trusted signer's own signature (its `.sig` and its referrers index) is there.
    let hex = signed.trim_start_matches("sha256:");
    for tag in tags(world).await {
        assert!(tag == "latest" || tag.starts_with(&format!("sha256-{hex}")), "{tag} was written");
    }
    let ledger = Ledger::open_read_only(&world.ws.path("state.db")).unwrap();
    let actions = ledger.actions(10).await.unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    let action = &actions[0];
    let detail = action.detail.clone().unwrap_or_default();
    assert_eq!(action.state.as_str(), "failed", "{detail}");
    assert!(detail.contains(signed) && detail.contains(unsigned), "both digests named: {detail}");
    assert!(ledger.tag_moves(None, 10).await.unwrap().is_empty(), "no move recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_rebase_never_acts_on_a_digest_the_tag_moved_to_after_its_check() {
    let runner = "[runner]\ntype = \"none\"\nrebase = \"registry\"\nmax_attempts = 1\n";
    let (world, _keys, signed, unsigned) = signed_world(runner, "").await;
    world.move_run_image().await;
    move_tag_after_the_signature_check(&world, &signed, &unsigned).await;
    world.proxy.clear();
    let out = world.run_once();
    assert_eq!(out.code, Some(1), "the action failed: {}", out.stderr);
    assert_untouched(&world, &signed, &unsigned).await;
}

/// The build path: a rebase command (`builder-monitor rebase` itself) with `builds = true` would
/// rebase whatever the tag holds and have our key sign it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runners_command_never_runs_on_a_digest_the_tag_moved_to_after_its_check() {
    let command =
        format!("[\"{}\", \"rebase\", \"{{image}}\", \"--run-image\", \"{{run_image}}\"]", support::daemon::BINARY);
    let runner = format!(
        "[runner]\ntype = \"exec\"\nmax_attempts = 1\n\n[runner.exec]\nrebuild = [\"false\"]\nrebase = {command}\n"
    );
    let (world, _keys, signed, unsigned) = signed_world(&runner, "builds = true\n").await;
    world.move_run_image().await;
    move_tag_after_the_signature_check(&world, &signed, &unsigned).await;
    world.proxy.clear();
    let out = world.run_once();
    assert_eq!(out.code, Some(1), "the action failed: {}", out.stderr);
    assert_untouched(&world, &signed, &unsigned).await;
}

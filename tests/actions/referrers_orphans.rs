//! `referrers orphans`: after two signed rebases moved the app's tag on, the first rebase's digest
//! is reached by no tag, and its `.sig`, `.att`, bundle referrers (and, on Distribution, its
//! referrers tag index) are what the command lists; `--delete` removes exactly those, leaving the
//! current digest's and another signer's, and a second run lists nothing. On both registries the
//! tests run (Debian's docker-registry with deletes on; go-containerregistry's with the referrers
//! API). And `rollback` records what the registry answered about the referrers API, as the daemon
//! does.

use crate::support;

use std::collections::BTreeSet;

use serde_json::Value;

use builder_monitor::registry::RegistryError;
use builder_monitor_core::reference::ImageRef;
use support::app::{self, RunImage};
use support::images::Format;
use support::referrers_registry::Kind;

use crate::signing::{PASSWORD, PASSWORD_ENV, PUBLIC_KEY, World, client, fixture, valid_signatures};

fn orphans(world: &World, extra: &[&str]) -> Value {
    let config = world.config.to_str().unwrap();
    let mut args = vec!["referrers", "orphans", "--json", "--config", config];
    args.extend_from_slice(extra);
    let out = support::daemon::run_with_env(&args, &[(PASSWORD_ENV, PASSWORD)], world.ws.dir.path());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// The one repository's orphaned digests, each with its artifacts.
fn orphaned(report: &Value) -> Vec<(String, Vec<Value>)> {
    let repositories = report["repositories"].as_array().unwrap();
    assert_eq!(repositories.len(), 1, "{report:#}");
    let orphans = repositories[0]["orphans"].as_array().unwrap();
    orphans
        .iter()
        .map(|o| (o["digest"].as_str().unwrap().to_string(), o["artifacts"].as_array().unwrap().clone()))
        .collect()
}

async fn exists(image: &ImageRef, reference: &str) -> bool {
    match client().get_manifest(image, reference).await {
        Ok(_) => true,
        Err(RegistryError::NotFound { .. }) => false,
        Err(err) => panic!("{reference}: {err}"),
    }
}

/// The bundle referrers of `digest`: the API's listing, or the referrers tag index's.
async fn bundles(kind: Kind, world: &World, digest: &str) -> BTreeSet<String> {
    let tag = world.tag();
    let listing = match kind {
        Kind::Referrers => {
            let url = format!("http://{}/v2/apps/web/referrers/{digest}", world.registry.host());
            support::http().get(url).send().await.unwrap().bytes().await.unwrap().to_vec()
        }
        Kind::Distribution => match client().get_manifest(&tag, &digest.replace(':', "-")).await {
            Ok(index) => index.bytes.to_vec(),
            Err(RegistryError::NotFound { .. }) => return BTreeSet::new(),
            Err(err) => panic!("{err}"),
        },
    };
    let index: Value = serde_json::from_slice(&listing).unwrap();
    index["manifests"].as_array().unwrap().iter().map(|m| m["digest"].as_str().unwrap().to_string()).collect()
}

async fn orphaned_artifacts_are_listed_then_removed_on(kind: Kind) {
    let world = World::on(kind, "[runner]\ntype = \"none\"\nrebase = \"registry\"\n", "").await;
    let tag = world.tag();
    let built = client().head_manifest(&tag).await.unwrap().digest;
    world.move_run_image().await;
    assert_eq!(world.run_once().code, Some(0));
    let first = client().head_manifest(&tag).await.unwrap().digest;
    app::push_run(&world.pusher, "demo/run", Some("latest"), &RunImage::jammy("3", 5), Format::Oci).await;
    assert_eq!(world.run_once().code, Some(0));
    let current = client().head_manifest(&tag).await.unwrap().digest;
    assert!(built != first && first != current, "two rebases moved the tag: {built} {first} {current}");
    // Another signer's signature of the app as built, which no tag reaches either.
    let dir = tempfile::tempdir().unwrap();
    let other = support::keys::p256(dir.path(), "other.key");
    support::keys::sign(&client(), &tag, &built, &other).await;
    let others_bundles = bundles(kind, &world, &built).await;
    assert_eq!(others_bundles.len(), 1, "the other signer's bundle");
    let first_bundles = bundles(kind, &world, &first).await;
    assert_eq!(first_bundles.len(), 2, "our signature's and attestation's bundles");

    let listed = orphaned(&orphans(&world, &[]));
    assert_eq!(listed.len(), 1, "only the first rebase's digest: {listed:#?}");
    let (digest, artifacts) = &listed[0];
    assert_eq!(digest, &first);
    let hex = first.trim_start_matches("sha256:");
    let mut expected_tags =
        vec![("signature", format!("sha256-{hex}.sig")), ("attestation", format!("sha256-{hex}.att"))];
    if kind == Kind::Distribution {
        expected_tags.push(("referrers_index", format!("sha256-{hex}")));
    }
    let found: BTreeSet<(String, Option<String>)> = artifacts
        .iter()
        .map(|a| (a["kind"].as_str().unwrap().to_string(), a["tag"].as_str().map(str::to_string)))
        .collect();
    assert_eq!(artifacts.len(), expected_tags.len() + 2, "{artifacts:#?}");
    for (kind, tag) in expected_tags {
        assert!(found.contains(&(kind.to_string(), Some(tag.clone()))), "{kind} {tag} in {artifacts:#?}");
    }
    let listed_bundles: BTreeSet<String> =
        artifacts.iter().filter(|a| a["kind"] == "bundle").map(|a| a["digest"].as_str().unwrap().to_string()).collect();
    assert_eq!(listed_bundles, first_bundles);
    for artifact in artifacts {
        assert!(artifact.get("kept").is_none() && artifact["deleted"] == false, "{artifact:#}");
    }
    assert!(exists(&tag, &format!("sha256-{hex}.sig")).await, "a listing removes nothing");

    let removed = orphaned(&orphans(&world, &["--delete"]));
    assert_eq!(removed.len(), 1);
    assert!(removed[0].1.iter().all(|a| a["deleted"] == true), "{removed:#?}");
    for suffix in [".sig", ".att", ""] {
        assert!(!exists(&tag, &format!("sha256-{hex}{suffix}")).await, "sha256-{hex}{suffix} is gone");
    }
    for bundle in &first_bundles {
        assert!(!exists(&tag, bundle).await, "bundle referrer {bundle} is gone");
    }
    assert!(bundles(kind, &world, &first).await.is_empty());
    // The current digest's signatures and the other signer's are all there.
    assert_eq!(valid_signatures(&tag, &current, &fixture(PUBLIC_KEY)).await, 1);
    assert_eq!(bundles(kind, &world, &current).await.len(), 2);
    assert!(exists(&tag, &format!("{}.sig", built.replace(':', "-"))).await, "another signer's .sig");
    assert_eq!(bundles(kind, &world, &built).await, others_bundles);
    assert!(exists(&tag, &current).await && exists(&tag, &first).await, "the images themselves are not touched");

    assert!(orphaned(&orphans(&world, &[])).is_empty(), "a second run lists nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_referrers_are_listed_and_removed_only_when_asked_on_distribution() {
    orphaned_artifacts_are_listed_then_removed_on(Kind::Distribution).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_referrers_are_listed_and_removed_only_when_asked_with_the_referrers_api() {
    orphaned_artifacts_are_listed_then_removed_on(Kind::Referrers).await;
}

/// A `rollback` that signs is the first write to the registry (the rebase before it ran without
/// `[signing]`): what the registry answered about the referrers API is in the ledger after it, as
/// `status` shows.
async fn a_rollback_records_the_referrers_answer_on(kind: Kind, served: bool) {
    let world = World::on(kind, "[runner]\ntype = \"none\"\nrebase = \"registry\"\n", "").await;
    let signed_config = std::fs::read_to_string(&world.config).unwrap();
    let unsigned = &signed_config[..signed_config.find("[signing]").unwrap()];
    std::fs::write(&world.config, unsigned).unwrap();
    world.move_run_image().await;
    assert_eq!(world.run_once().code, Some(0));
    let config = world.config.to_str().unwrap();
    let status = |world: &World| {
        let out = support::daemon::run_with_env(&["status", "--json", "--config", config], &[], world.ws.dir.path());
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str::<Value>(&out.stdout).unwrap()["registries"][0].clone()
    };
    assert_eq!(status(&world)["referrers"], Value::Null, "nothing signed yet, nothing asked");

    std::fs::write(&world.config, &signed_config).unwrap();
    let env = [(PASSWORD_ENV, PASSWORD)];
    let back = support::daemon::run_with_env(&["rollback", "web", "--config", config], &env, world.ws.dir.path());
    assert_eq!(back.code, Some(0), "{}", back.stderr);
    assert!(back.stdout.contains("signed"), "{}", back.stdout);
    let registry = status(&world);
    assert_eq!(registry["host"], world.host.as_str());
    assert_eq!(registry["referrers"], served, "{registry:#}");
    assert!(registry["probed"].is_string(), "{registry:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_records_that_distribution_has_no_referrers_api() {
    a_rollback_records_the_referrers_answer_on(Kind::Distribution, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_records_that_the_referrers_registry_serves_the_api() {
    a_rollback_records_the_referrers_answer_on(Kind::Referrers, true).await;
}

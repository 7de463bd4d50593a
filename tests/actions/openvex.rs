//! What a move fixes, attested as OpenVEX (issue 63, item 3) and read by cosign itself: a registry
//! rebase onto a run image whose move fixes a planted notice (a CVE record for `openssl` in a
//! local OSV mirror) has its new digest's OpenVEX document accepted by `cosign verify-attestation
//! --type openvex` in cosign's three ways (v2 with `--trusted-root`, v3 at its defaults, v3 with
//! `--new-bundle-format=false`), on Distribution 2.8 and on a registry with the referrers API;
//! refused for the digest before and for another key. The predicate says `fixed` of the CVE, with
//! the new digest's purl as product and the moved package as subcomponent. A move that fixes
//! nothing, and one whose new package list was cut at its cap, attest no OpenVEX at all.

use crate::support;

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::cosign::{accepted, referrers, stranger};
use super::signing::{PUBLIC_KEY, World, client, fixture};
use support::app::{self, RunImage};
use support::cosign::{ALL, Verifier};
use support::images::Format;
use support::referrers_registry::Kind;

const OPENVEX: &str = "openvex";
const FIXED: &str = "3.0.2-0ubuntu1.16";

/// A jammy run image listing `openssl` at `version` (`salt`: new digests), `filler` packages more.
fn listed_run(salt: &str, version: &str, filler: usize) -> RunImage {
    let mut run = RunImage::jammy(salt, 3);
    let mut list: Vec<Value> = serde_json::from_str(&support::osv::openssl_packages(version)).unwrap();
    list.extend((0..filler).map(|i| json!({"name": format!("filler{i}"), "version": "1.0", "arch": "amd64"})));
    for (key, value) in support::osv::jammy_labels(version) {
        run = run.label(key, &value);
    }
    run.label("io.paketo.stack.packages", &serde_json::to_string(&list).unwrap())
}

/// A daemon rebasing `apps/web` in the registry, with an OSV mirror holding one CVE record that
/// `openssl` `FIXED` fixes; the app on a run image with `openssl` a version below.
async fn world(kind: Kind, mirror: &Path) -> World {
    support::osv::write_mirror(mirror, &[("CVE-2026-7001", "high", FIXED)]);
    let runner = format!(
        "[runner]\ntype = \"none\"\nrebase = \"registry\"\n\n[vulnerabilities]\nosv = \"{}\"\n",
        mirror.display()
    );
    World::on_run(kind, &runner, "", listed_run("1", "3.0.2-0ubuntu1.15", 0)).await
}

/// Moves the run image to `run`, runs the daemon once, and answers the app's new digest.
async fn rebased_onto(world: &World, run: &RunImage) -> String {
    let before = client().head_manifest(&world.tag()).await.unwrap().digest;
    app::push_run(&world.pusher, "demo/run", Some("latest"), run, Format::Oci).await;
    let out = world.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let after = client().head_manifest(&world.tag()).await.unwrap().digest;
    assert_ne!(after, before, "rebased: {}", out.stderr);
    after
}

/// The OpenVEX predicates cosign printed (the in-toto statements of its verified envelopes).
fn printed_predicates(text: &str) -> Vec<Value> {
    let envelopes = text.lines().filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok());
    let statements = envelopes.filter_map(|e| STANDARD.decode(e["payload"].as_str()?).ok());
    let statements = statements.filter_map(|s| serde_json::from_slice::<Value>(&s).ok());
    statements.filter(|s| s["predicateType"] == "https://openvex.dev/ns").map(|s| s["predicate"].clone()).collect()
}

/// The bundle referrers' predicate types of `digest`, sorted.
async fn bundle_predicates(host: &str, digest: &str) -> Vec<String> {
    let (listed, _) = referrers(host, "apps/web", digest).await;
    let mut types: Vec<String> = listed
        .iter()
        .filter_map(|m| m["annotations"]["dev.sigstore.bundle.predicateType"].as_str().map(str::to_string))
        .collect();
    types.sort_unstable();
    types
}

async fn a_fixing_rebase_attests_openvex_that_cosign_verifies(kind: Kind) {
    let verifier = Verifier::new();
    let mirror = tempfile::tempdir().unwrap();
    let world = world(kind, mirror.path()).await;
    let host = world.host.clone();
    let before = client().head_manifest(&world.tag()).await.unwrap().digest;
    let rebased = rebased_onto(&world, &listed_run("2", FIXED, 0)).await;
    let reference = format!("{host}/apps/web@{rebased}");
    let key = PathBuf::from(fixture(PUBLIC_KEY));
    // The signature and provenance as ever, and the OpenVEX document by every way.
    accepted(&verifier, &reference, &key);
    let purl = format!("pkg:oci/web@{}?repository_url={host}/apps/web", rebased.replace(':', "%3A"));
    for which in ALL {
        let said = verifier.verify_attestation(which, &reference, &key, OPENVEX);
        assert!(said.ok, "cosign {which:?} verify-attestation --type openvex {reference} refused it: {}", said.text);
        let predicates = printed_predicates(&said.text);
        assert_eq!(predicates.len(), 1, "cosign {which:?} printed one OpenVEX statement: {}", said.text);
        let doc = &predicates[0];
        assert_eq!(doc["@context"], "https://openvex.dev/ns/v0.2.0", "{doc:#}");
        assert_eq!(doc["author"], "builder-monitor");
        let statements = doc["statements"].as_array().unwrap();
        assert_eq!(statements.len(), 1, "{doc:#}");
        let statement = &statements[0];
        assert_eq!(statement["vulnerability"]["name"], "CVE-2026-7001", "{doc:#}");
        assert_eq!(statement["status"], "fixed", "{doc:#}");
        assert_eq!(statement["products"][0]["@id"], purl.as_str(), "the product is the new digest: {doc:#}");
        assert_eq!(
            statement["products"][0]["subcomponents"][0]["@id"],
            format!("pkg:deb/ubuntu/openssl@{FIXED}?distro=ubuntu-22.04"),
            "{doc:#}"
        );
        let notes = statement["status_notes"].as_str().unwrap();
        assert!(notes.contains(&format!("vulnerability data: {}", mirror.path().display())), "{notes}");
        assert!(notes.contains("current as of "), "the data's age: {notes}");
    }
    // Once each as a bundle; a second layer of the one `.att` beside the provenance.
    let predicates = bundle_predicates(&host, &rebased).await;
    let want = ["https://openvex.dev/ns", "https://sigstore.dev/cosign/sign/v1", "https://slsa.dev/provenance/v1"];
    assert_eq!(predicates, want, "each bundle once");
    let att = format!("{}.att", rebased.replace(':', "-"));
    let manifest = client().get_manifest(&world.tag(), &att).await.unwrap();
    let manifest: Value = serde_json::from_slice(&manifest.bytes).unwrap();
    let layer_types: Vec<&str> = manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["annotations"]["predicateType"].as_str())
        .collect();
    assert_eq!(layer_types, ["https://slsa.dev/provenance/v1", "https://openvex.dev/ns"], "{manifest:#}");
    let said = verifier.crane_validate(&format!("{host}/apps/web:{att}"), true);
    assert!(said.ok, "crane validate --fast {att}: {}", said.text);

    // A digest we did not sign, and another key: refused by every way.
    for which in ALL {
        let unsigned = format!("{host}/apps/web@{before}");
        let said = verifier.verify_attestation(which, &unsigned, &key, OPENVEX);
        assert!(!said.ok, "cosign {which:?} accepted OpenVEX of a digest we did not sign: {}", said.text);
        let other = tempfile::tempdir().unwrap();
        let said = verifier.verify_attestation(which, &reference, &stranger(other.path()), OPENVEX);
        assert!(!said.ok, "cosign {which:?} accepted OpenVEX with another key: {}", said.text);
    }
    // Another run changes nothing: nothing written twice.
    let out = world.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(bundle_predicates(&host, &rebased).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixing_rebase_attests_openvex_that_cosign_verifies_on_distribution() {
    a_fixing_rebase_attests_openvex_that_cosign_verifies(Kind::Distribution).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixing_rebase_attests_openvex_that_cosign_verifies_on_a_registry_with_the_referrers_api() {
    a_fixing_rebase_attests_openvex_that_cosign_verifies(Kind::Referrers).await;
}

/// No OpenVEX for `digest`: no bundle of it, no `.att` layer, and cosign finds none (while the
/// provenance verifies).
async fn no_openvex(verifier: &Verifier, world: &World, digest: &str) {
    let reference = format!("{}/apps/web@{digest}", world.host);
    let key = PathBuf::from(fixture(PUBLIC_KEY));
    accepted(verifier, &reference, &key);
    let predicates = bundle_predicates(&world.host, digest).await;
    assert_eq!(predicates, ["https://sigstore.dev/cosign/sign/v1", "https://slsa.dev/provenance/v1"]);
    for which in ALL {
        let said = verifier.verify_attestation(which, &reference, &key, OPENVEX);
        assert!(!said.ok, "cosign {which:?} found an OpenVEX attestation: {}", said.text);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_that_fixes_nothing_or_whose_list_was_cut_attests_no_openvex() {
    let verifier = Verifier::new();
    let mirror = tempfile::tempdir().unwrap();
    let world = world(Kind::Distribution, mirror.path()).await;
    // openssl stays below the fix: the move fixes no known notice.
    let unfixed = rebased_onto(&world, &listed_run("2", "3.0.2-0ubuntu1.15", 0)).await;
    no_openvex(&verifier, &world, &unfixed).await;
    // openssl reaches the fix, but the list goes on past its cap: a binary past the cut may still
    // be vulnerable, so nothing is claimed fixed (the change says why).
    let cut = rebased_onto(&world, &listed_run("3", FIXED, builder_monitor_core::packages::MAX_PACKAGES)).await;
    no_openvex(&verifier, &world, &cut).await;
    let out = world.ws.run(&["status", "--json", "--config", world.config.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let status: Value = serde_json::from_str(&out.stdout).unwrap();
    let change = &status["run_images"][0]["changes"][0];
    assert_eq!(change["fixes"], json!([]), "{change:#}");
    assert!(change["fixes_unknown"][0]["reason"].as_str().unwrap().contains("cut"), "{change:#}");
}

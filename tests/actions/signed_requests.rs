//! What signing costs each app of a fleet patch at the registry, counted at a proxy in front of the
//! real registry (Distribution: no referrers API, no monolithic uploads): the rebase's requests,
//! and for the digest the tag will lead to its three signature forms (the `.sig` and `.att` tags,
//! and the signature's and the attestation's Sigstore bundles as referrers, listed in the
//! referrers tag index), each blob uploaded once, the empty config shared by every bundle
//! referrer uploaded into one repository and mounted into the others, the registry asked once
//! whether it serves the referrers API. A count, so that a request added per signed app fails here.

use crate::rebase_daemon::Fleet;

use support::app::{self, RunImage};
use support::images::Format;

use crate::support;

/// A request of an app's, as the proxy saw it, by kind.
fn kind(method: &str, path: &str) -> &'static str {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let reference = path.rsplit_once("/manifests/").map(|(_, r)| r);
    match (method, reference) {
        ("GET", Some("latest")) => "GET tag",
        ("HEAD", Some("latest")) => "HEAD tag",
        ("PUT", Some("latest")) => "PUT tag",
        ("GET", Some(r)) if r.ends_with(".sig") || r.ends_with(".att") => "GET .sig/.att",
        ("PUT", Some(r)) if r.ends_with(".sig") || r.ends_with(".att") => "PUT .sig/.att",
        ("GET", Some(r)) if r.starts_with("sha256-") => "GET referrers index",
        ("PUT", Some(r)) if r.starts_with("sha256-") => "PUT referrers index",
        ("PUT", Some(r)) if r.starts_with("sha256:") => "PUT by digest",
        _ if path.contains("/referrers/") => "GET referrers API",
        ("POST", None) if query.contains("mount=") => "mount",
        ("POST", None) if path.ends_with("/blobs/uploads/") => "upload start",
        ("PUT", None) if path.contains("/blobs/uploads/") => "upload end",
        ("GET", None) if path.contains("/blobs/") => "GET blob",
        _ => "other",
    }
}

/// Three apps, signed and attested at `[signing]`'s defaults; a new run image whose top layer alone
/// changed. Each app costs the unsigned rebase's eight requests (`fleet_requests`), then: the tag's
/// HEAD before signing and the rebased manifest PUT by digest (a signature names it before the tag
/// moves); the `.sig` and `.att` tags read (another signer's layers are kept) and PUT; their layer
/// and config blobs and the two bundles uploaded (POST and PUT each: six uploads); the two bundle
/// referrer manifests PUT by digest; the referrers tag index read and PUT; the empty config mounted
/// from the one app that uploaded it. 31 requests; 32 for that app, and the question whether the
/// registry serves the referrers API, asked until it is first answered (then kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_fleet_app_costs_a_counted_number_of_requests() {
    const APPS: usize = 3;
    let fleet = Fleet::signed(APPS).await;
    let v1 = RunImage::jammy("1", 3);
    let mut v2 = RunImage::jammy("2", 3);
    v2.layers[..2].clone_from_slice(&v1.layers[..2]);
    app::push_run(&fleet.pusher, "demo/run", Some("latest"), &v2, Format::Oci).await;
    fleet.proxy.clear();
    let out = fleet.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    let seen = fleet.proxy.seen();
    let (mut uploaded_empty, mut probes) = (0, 0);
    for i in 0..APPS {
        let prefix = format!("/v2/apps/web-{i}/");
        let of_app: Vec<(&'static str, String)> = seen
            .iter()
            .filter(|s| s.path.starts_with(&prefix))
            .map(|s| (kind(&s.method, &s.path), format!("{} {}", s.method, &s.path[prefix.len()..])))
            .collect();
        let count = |k: &str| of_app.iter().filter(|(kind, _)| *kind == k).count();
        let listed: Vec<&String> = of_app.iter().map(|(_, r)| r).collect();
        probes += count("GET referrers API");
        // The app that uploaded the empty config: one upload more, one mount less.
        let holder = usize::from(count("mount") == 1);
        uploaded_empty += holder;
        assert_eq!(count("GET tag"), 1, "planning's read of the app: {listed:#?}");
        assert_eq!(count("GET blob"), 1, "planning's read of its config: {listed:#?}");
        assert_eq!(count("HEAD tag"), 3, "before signing, before the tag's PUT and after it: {listed:#?}");
        assert_eq!(count("PUT tag"), 1, "{listed:#?}");
        assert_eq!(count("PUT by digest"), 3, "the rebased manifest and the two bundle referrers: {listed:#?}");
        assert_eq!(count("GET .sig/.att"), 2, "{listed:#?}");
        assert_eq!(count("PUT .sig/.att"), 2, "{listed:#?}");
        assert_eq!(count("GET referrers index"), 1, "{listed:#?}");
        assert_eq!(count("PUT referrers index"), 1, "{listed:#?}");
        assert_eq!(count("mount"), 2 - holder, "the changed layer, and the empty config but once: {listed:#?}");
        let uploads = 7 + holder;
        assert_eq!(count("upload start"), uploads, "the config, 2 signature blobs, 2 configs, 2 bundles: {listed:#?}");
        assert_eq!(count("upload end"), uploads, "{listed:#?}");
        assert_eq!(count("other"), 0, "{listed:#?}");
        assert_eq!(of_app.len() - count("GET referrers API"), 31 + holder, "{listed:#?}");
    }
    assert_eq!(uploaded_empty, 1, "the empty config is uploaded into one repository, mounted into the others");
    // Asked by the signatures under way before the first answer (the answer is then kept).
    assert!((1..=APPS).contains(&probes), "whether it serves the referrers API: {probes} questions");
    fleet.assert_all_on(&v2).await;
    fleet.assert_one_rebase_each().await;
}

//! Leadership on the real control plane (issue 62 item 1, in part): a leader whose Lease another
//! writer takes (a conflicting write, as a replica that judged it expired would make) stops
//! acting: it logs the loss naming the new holder, `/readyz` says `"leader": false`, and it stands
//! by without writing the Lease back while that holder renews; once the holder releases it, the
//! same process leads again, without a restart. And it writes nothing more from the moment it
//! knows: work of its term still in flight (a build Job's create waiting for a right) is not
//! carried out once it could be — no Job, no ledger ConfigMap changed — but is left to the leader,
//! here the same process once it leads again, which then builds it once.

use crate::support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use serde_json::Value;

use crate::exact_rbac::World;
use crate::revoked_right::{Bound, Right, TOKEN_ENV};
use support::cnb::BuilderSpec;
use support::daemon::Daemon;
use support::images::{Format, Image, Pusher};

const INTRUDER: &str = "another-replica";

async fn readyz(addr: &str) -> Value {
    support::http().get(format!("http://{addr}/readyz")).send().await.unwrap().json().await.unwrap()
}

/// Writes the Lease as another replica taking it over: holder, acquire and renew times, with the
/// resourceVersion read (a 409 means the leader renewed in between: read again).
async fn take_over(leases: &Api<Lease>, holder: Option<&str>, duration: i32) {
    loop {
        let mut lease = leases.get("builder-monitor").await.unwrap();
        let spec = lease.spec.get_or_insert_with(Default::default);
        spec.holder_identity = holder.map(str::to_string);
        spec.lease_duration_seconds = Some(duration);
        spec.acquire_time = Some(MicroTime(Timestamp::now()));
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match leases.replace("builder-monitor", &PostParams::default(), &lease).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("write the Lease: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_taken_stops_acting_and_leads_again_once_it_is_released() {
    let w = World::new("lease_duration = \"6s\"\nrenew_deadline = \"4s\"\nretry_period = \"1s\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n").await;
    std::fs::copy(&w.ns.kubeconfig, w.ws.path("account.kubeconfig")).expect("the admin kubeconfig");
    let mut daemon = Daemon::start(&w.config);
    let addr = daemon.server_addr();
    daemon.wait_for("leadership", |l| l["message"] == "became leader");
    daemon.wait_for_event("builder.pinned");
    assert_eq!(readyz(&addr).await["leader"], true);

    let leases: Api<Lease> = Api::namespaced(w.ns.client.clone(), &w.ns.name);
    // Held for an hour: only its release ends it.
    take_over(&leases, Some(INTRUDER), 3600).await;
    let lost = daemon.wait_for("the loss", |l| l["message"] == "lost leadership");
    assert_eq!(lost["why"], format!("the lease is held by {INTRUDER}"), "{lost}");
    daemon.wait_for("standing by", |l| l["message"] == "standing by; another replica leads" && l["holder"] == INTRUDER);
    let ready = readyz(&addr).await;
    assert_eq!(ready["leader"], false, "{ready}");
    // Standing by, it leaves the Lease alone: its next attempts find it held and write nothing.
    let held = leases.get("builder-monitor").await.unwrap();
    assert_eq!(held.spec.as_ref().unwrap().holder_identity.as_deref(), Some(INTRUDER));

    // Released (as a replica stopping does): the same process takes it and leads again.
    take_over(&leases, None, 1).await;
    daemon.wait_for("leadership again", |l| l["message"] == "became leader");
    let held = leases.get("builder-monitor").await.unwrap();
    assert_ne!(held.spec.as_ref().unwrap().holder_identity.as_deref(), Some(INTRUDER));
    assert_eq!(readyz(&addr).await["leader"], true);
    let (status, log) = daemon.terminate();
    assert!(status.success(), "{}", log.join("\n"));
}

/// Each ledger ConfigMap of the world's namespace, by name, with its resourceVersion.
async fn ledger_versions(w: &World) -> Vec<(String, String)> {
    let configmaps = w.ns.api("v1", "ConfigMap").await;
    let params = kube::api::ListParams::default().labels("buildermonitor.dev/ledger");
    let listed = configmaps.list(&params).await.unwrap();
    let mut versions: Vec<(String, String)> = listed
        .items
        .into_iter()
        .map(|c| (c.metadata.name.unwrap_or_default(), c.metadata.resource_version.unwrap_or_default()))
        .collect();
    versions.sort();
    versions
}

async fn jobs(w: &World) -> usize {
    let jobs = w.ns.api("batch/v1", "Job").await;
    jobs.list(&Default::default()).await.unwrap().items.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_taken_writes_nothing_more_of_its_term() {
    let w = World::new(&format!(
        "lease_duration = \"30s\"\nrenew_deadline = \"4s\"\nretry_period = \"1s\"\n\n\
         [server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"{TOKEN_ENV}\"\n\n\
         [[images]]\nname = \"good\"\nbuilder = \"jammy\"\nimage = \"HOST/apps/good:latest\"\npolicy = \"rebuild\"\n\
         source = {{ git = \"https://example.com/good.git\", revision = \"main\" }}\n\n\
         [runner]\ntype = \"kubernetes\"\nmax_attempts = 1\n\n[runner.kubernetes]\nnamespace = \"NAMESPACE\"\n"
    ))
    .await;
    let host = w._registry.host.clone();
    let pusher = Pusher::new(&host);
    pusher.push_image("apps/good", Some("latest"), &Image::new("amd64").salt("good"), Format::Oci).await;
    let bound = Bound::new(&w.ns, &w.ws, &w.config).await;
    let mut daemon = bound.start();
    let addr = daemon.server_addr();
    daemon.wait_for("leadership", |l| l["message"] == "became leader");
    daemon.wait_for_event("builder.pinned");

    // A rebuild in flight: its Job waits for `create` on Jobs.
    let right = Right { verb: "create", group: "batch", resource: "jobs", namespace: Some(&w.ns.name) };
    bound.revoke(right).await;
    let spec = BuilderSpec::jammy(&format!("{host}/demo/run:2"));
    pusher.push_image("demo/builder", Some("latest"), &spec.image(), Format::Oci).await;
    bound.check_now(&addr, "jammy").await;
    bound.reported_missing(&mut daemon, &addr, right, "image \"good\"'s Job").await;

    let leases: Api<Lease> = Api::namespaced(w.ns.client.clone(), &w.ns.name);
    take_over(&leases, Some(INTRUDER), 3600).await;
    daemon.wait_for("the loss", |l| l["message"] == "lost leadership");
    let versions = ledger_versions(&w).await;
    // The right back while the term's work still has its grace: the create that waited is not
    // made, nor its end recorded — the old leader writes nothing more.
    bound.restore(&mut daemon, right).await;
    let fenced = daemon.wait_for("the write left to the leader", |l| {
        l["error"].as_str().is_some_and(|e| e.contains("this replica no longer leads"))
    });
    assert_eq!(jobs(&w).await, 0, "no Job after the loss: {fenced}");
    assert_eq!(ledger_versions(&w).await, versions, "no ledger write after the loss: {fenced}");

    // Released: the same process leads again and carries the build out, once.
    take_over(&leases, None, 1).await;
    daemon.wait_for("leadership again", |l| l["message"] == "became leader");
    let built = daemon.wait_for_event("build.succeeded");
    assert_eq!(built["action"]["image"], "good", "{built}");
    assert_eq!(jobs(&w).await, 1, "built once");
    let (status, log) = daemon.terminate();
    assert!(status.success(), "{}", log.join("\n"));
}

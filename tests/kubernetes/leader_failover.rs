//! Leadership on the real control plane (issue 62 item 1): two daemons with leader election and
//! the ConfigMap ledger on one namespace, a fleet of registry rebases under way; the leader is
//! killed with SIGKILL right after one of its tag writes landed. The follower takes over once the
//! Lease has expired and within lease duration + renew deadline of the leader's last renewal (read
//! from the Lease's own timestamps, not from how fast this machine is), and every rebase is carried
//! out exactly once: one tag write per app in the registry, one recorded move, one
//! `rebase.succeeded`, none lost.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use builder_monitor::ledger::{ActionState, Ledger};
use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use support::app::{self, App, RunImage};
use support::cnb::BuilderSpec;
use support::control_plane::control_plane;
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Pusher};
use support::proxy::{Proxy, Trap};
use support::registry::{Auth, TestRegistry};

/// Apps rebased when the run image moves.
const APPS: usize = 6;
/// The leader dies right after this many of their tag writes landed.
const KILLED_AFTER: usize = 3;
// Long enough that a loaded machine's slow request cannot push a takeover past the bound below:
// the follower asks every 500 ms, so it takes the Lease about 0.5 s after expiry, 5.5 s inside it.
const LEASE_DURATION: i64 = 8;
const RENEW_DEADLINE: i64 = 6;

/// The Lease's holder and its renew and acquire times.
fn held(lease: &Lease) -> (String, chrono::DateTime<Utc>, chrono::DateTime<Utc>) {
    let spec = lease.spec.clone().unwrap();
    let time = |t: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
        chrono::DateTime::from_timestamp_micros(t.unwrap().0.as_microsecond()).unwrap()
    };
    (spec.holder_identity.unwrap_or_default(), time(spec.renew_time), time(spec.acquire_time))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_takes_over_a_killed_leaders_fleet_of_rebases_and_carries_out_each_once() {
    // Relative upload locations, so the daemons' uploads stay on the proxy that counts them.
    let registry = TestRegistry::start_relative(Auth::Anonymous);
    let proxy = Proxy::start(&registry.host).await;
    let pusher = Pusher::new(&registry.host);
    let host = proxy.host.clone();
    let run_tag = format!("{host}/demo/run:latest");
    let run_v1 = RunImage::jammy("1", 3);
    let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
    let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest));
    let mut images = String::new();
    for i in 0..APPS {
        app::push_app(&pusher, &format!("apps/web{i}"), Some("latest"), &app, Format::Oci).await;
        images += &format!(
            "[[images]]\nname = \"web{i}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web{i}:latest\"\npolicy = \"auto\"\n\n"
        );
    }
    let ns = control_plane().namespace("failover").await;
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"kubernetes\"\ninterval = \"1s\"\njitter = \"0s\"\n\n\
         [registries.\"{host}\"]\ninsecure = true\nrequests_per_second = 0\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n{images}\
         [runner]\ntype = \"none\"\nrebase = \"registry\"\nbackoff = \"1s\"\nmax_registry_rebases = 2\n\n\
         [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{}\"\nleader_election = true\n\
         lease_duration = \"{LEASE_DURATION}s\"\nrenew_deadline = \"{RENEW_DEADLINE}s\"\nretry_period = \"500ms\"\n",
        ns.kubeconfig.display(),
        ns.name,
    ));

    let mut leader = Daemon::start_with_env(&config, &[("POD_NAME", "replica-a")]);
    leader.wait_for("a leads", |v| v["message"] == "became leader");
    leader.wait_for_event("builder.pinned");
    let mut follower = Daemon::start_with_env(&config, &[("POD_NAME", "replica-b")]);
    follower.wait_for("b stands by", |v| v["message"] == "standing by; another replica leads");

    // SIGKILL right after the registry answered the leader's KILLED_AFTER-th tag write, before
    // the answer reaches it.
    let killed = Arc::new(tokio::sync::Notify::new());
    let (pid, done) = (leader.pid().to_string(), killed.clone());
    let mut kill = Trap::after("PUT", "/manifests/latest", move || {
        let (pid, done) = (pid.clone(), done.clone());
        async move {
            std::process::Command::new("kill").args(["-KILL", &pid]).status().expect("kill");
            done.notify_one();
        }
    });
    kill.skip = KILLED_AFTER - 1;
    proxy.trap(kill);

    let pushed_before = registry.log().len();
    let run_v2 = RunImage::jammy("2", 3);
    app::push_run(&pusher, "demo/run", Some("latest"), &run_v2, Format::Oci).await;
    tokio::time::timeout(support::PATIENCE, killed.notified()).await.expect("the leader's tag writes");
    // The Lease as the dead leader left it: nobody may take it before it expires.
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), &ns.name);
    let dead = leases.get("builder-monitor").await.expect("the Lease");
    let leader_log = tokio::task::block_in_place(|| {
        while leader.next_line(Duration::from_millis(100)).is_some() {}
        leader.log.join("\n")
    });
    leader.kill();
    tokio::task::block_in_place(|| follower.wait_for("b takes over", |v| v["message"] == "became leader"));
    let (holder, renewed, _) = held(&dead);
    assert_eq!(holder, "replica-a", "the killed replica held the Lease; its log:\n{leader_log}");
    let (holder, _, acquired) = held(&leases.get("builder-monitor").await.unwrap());
    assert_eq!(holder, "replica-b");
    let after = acquired - renewed;
    // Never before the Lease expired (two leaders at once), and within lease duration + renew
    // deadline of the last renewal: the follower sees the renewal one retry period late at most,
    // then takes the Lease at its first attempt after the duration.
    assert!(after >= chrono::Duration::seconds(LEASE_DURATION), "taken {after} after the last renewal");
    assert!(
        after <= chrono::Duration::seconds(LEASE_DURATION + RENEW_DEADLINE),
        "taken {after} after the last renewal"
    );

    // The follower finishes the fleet: every app's rebase succeeded, nothing left open.
    let ledger = Ledger::kubernetes(ns.client.clone(), &ns.name, Utc::now());
    loop {
        tokio::task::block_in_place(|| follower.wait_for_event("rebase.succeeded"));
        let actions = ledger.actions(100).await.unwrap();
        let done = actions.iter().filter(|a| a.state == ActionState::Succeeded).count();
        if done == APPS && ledger.open_actions().await.unwrap().is_empty() {
            assert_eq!(actions.len(), APPS, "one action per app: {actions:#?}");
            break;
        }
    }

    // The killed leader's rebase whose tag write had landed was taken over, not left running.
    assert!(
        follower.log.iter().any(|l| l.contains("action was running when the daemon stopped; it runs again")),
        "{}",
        follower.log.join("\n")
    );

    // Exactly once in the registry: one tag write per app, whoever made it. Counted in the
    // registry's own log: a write the registry took as the leader died never reached the proxy's
    // record of answers.
    let mut writes: BTreeMap<String, usize> = BTreeMap::new();
    let puts = registry.log()[pushed_before..]
        .iter()
        .filter(|l| l.contains("response completed") && l.contains("http.request.method=PUT"))
        .cloned()
        .collect::<Vec<_>>();
    for line in puts {
        let app =
            (0..APPS).map(|i| format!("web{i}")).find(|a| line.contains(&format!("/v2/apps/{a}/manifests/latest")));
        if let Some(app) = app {
            *writes.entry(app).or_default() += 1;
        }
    }
    let once: BTreeMap<String, usize> = (0..APPS).map(|i| (format!("web{i}"), 1)).collect();
    assert_eq!(writes, once, "tag writes per app");
    // …and in the ledger: one recorded move and one rebase.succeeded per app.
    for i in 0..APPS {
        let moves = ledger.tag_moves(Some(&format!("web{i}")), 100).await.unwrap();
        assert_eq!(moves.len(), 1, "web{i}: {moves:#?}");
    }
    let events = ledger.events_after(0, 10_000).await.unwrap();
    let mut succeeded: BTreeMap<String, usize> = BTreeMap::new();
    for e in events.iter().filter(|e| e.event.event_type.as_str() == "rebase.succeeded") {
        let image = e.event.action.as_ref().map(|a| a.image.clone()).unwrap_or_default();
        *succeeded.entry(image).or_default() += 1;
    }
    assert_eq!(succeeded, once, "rebase.succeeded per app");
    let (status, log) = follower.terminate();
    assert!(status.success(), "{}", log.join("\n"));
}

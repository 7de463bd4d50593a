//! Checks asked for over HTTP: registry push notifications (token-protected, coalesced, rate
//! limited per client, a move found with one HEAD and within two seconds of a push) and a run image
//! watch checked on demand.

use super::*;

#[tokio::test]
async fn hooks_need_the_token_and_coalesce_into_a_normal_check() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let s = serve(&config(&registry.host, "")).await;
    let run = CancellationToken::new();
    tokio::spawn(s.monitor.clone().run(run.clone()));
    let checks = |m: &Monitor| m.handle().metrics().checks_of("b", None);
    wait_until(|| checks(&s.monitor) == 1).await;

    let hook = format!("{}/hooks/distribution", s.base);
    let forged = json!({ "events": [{ "action": "push", "target": { "repository": "demo/b", "tag": "latest", "digest": "sha256:forged", "url": format!("http://{}/v2/demo/b/manifests/sha256:forged", registry.host) } }] });
    let post = |url: String, token: Option<&'static str>| {
        let body = forged.to_string();
        async move {
            let mut r = support::http()
                .post(url)
                .header("content-type", "application/vnd.docker.distribution.events.v1+json")
                .body(body);
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            r.send().await.unwrap()
        }
    };
    assert_eq!(post(hook.clone(), None).await.status(), 401);
    assert_eq!(post(hook.clone(), Some("wrong-token-wrong-token")).await.status(), 401);
    assert_eq!(checks(&s.monitor), 1, "refused hooks cause no check");

    let response = post(hook.clone(), Some(TOKEN)).await;
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["checks"], json!(["b"]));
    // The check at once and its two follow-ups (the tag still shows the pin).
    let handle = s.monitor.handle();
    wait_until(|| checks(&s.monitor) == 4 && !handle.hook_checks_pending("b")).await;
    // The forged digest was not believed: the check found the tag unchanged.
    assert!(s.ledger.changes(None, 10).await.unwrap().is_empty());
    let pin = s.ledger.watch("b").await.unwrap().unwrap().pin.unwrap();
    assert_ne!(pin.digest, "sha256:forged");

    // ?token= works for registries that can only call a static URL.
    let response = post(format!("{hook}?token={TOKEN}"), None).await;
    assert_eq!(response.status(), 202);
    wait_until(|| checks(&s.monitor) == 7 && !handle.hook_checks_pending("b")).await;
    // Other repositories, tags or registries schedule nothing.
    let other = json!({ "events": [{ "action": "push", "target": { "repository": "demo/b", "tag": "other" } }] });
    let response = support::http().post(&hook).bearer_auth(TOKEN).body(other.to_string()).send().await.unwrap();
    assert_eq!(response.json::<Value>().await.unwrap()["checks"], json!([]));

    // The check endpoint.
    let url = format!("{}/api/v1/builders/b/check", s.base);
    assert_eq!(support::http().post(&url).send().await.unwrap().status(), 401);
    assert_eq!(support::http().post(&url).bearer_auth(TOKEN).send().await.unwrap().status(), 202);
    wait_until(|| checks(&s.monitor) == 8).await;
    let url = format!("{}/api/v1/builders/nope/check", s.base);
    assert_eq!(support::http().post(&url).bearer_auth(TOKEN).send().await.unwrap().status(), 404);

    // Bodies over 1 MiB and malformed payloads are refused.
    let big = "x".repeat(2 << 20);
    let response = support::http().post(&hook).bearer_auth(TOKEN).body(big).send().await.unwrap();
    assert_eq!(response.status(), 413);
    let response = support::http().post(&hook).bearer_auth(TOKEN).body("{not json").send().await.unwrap();
    assert_eq!(response.status(), 400);
    run.cancel();
}

/// A run image watch can be checked on demand like a builder, by its `run:…` name (its slashes
/// percent-encoded in the path), at `/api/v1/watches/{name}/check`.
#[tokio::test]
async fn a_run_image_watch_is_checked_on_demand() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let run_image = format!("{}/demo/run:latest", registry.host);
    pusher.push_image("demo/run", Some("latest"), &Image::new("amd64").salt("run"), Format::Oci).await;
    let spec = support::cnb::BuilderSpec::jammy(&run_image);
    pusher.push_image("demo/b", Some("latest"), &spec.image(), Format::Oci).await;
    let text = config(&registry.host, "").replace("watch_run_image = false\n", "");
    let s = serve(&text).await;
    let run = CancellationToken::new();
    tokio::spawn(s.monitor.clone().run(run.clone()));
    let watch = format!("run:{run_image}");
    let checks = |m: &Monitor| m.handle().metrics().checks_of(&watch, None);
    wait_until(|| checks(&s.monitor) == 1).await;

    let encoded = watch.replace('/', "%2F");
    for path in [format!("watches/{encoded}/check"), format!("builders/{encoded}/check")] {
        let before = checks(&s.monitor);
        let url = format!("{}/api/v1/{path}", s.base);
        let response = support::http().post(&url).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(response.status(), 202, "{path}");
        assert_eq!(response.json::<Value>().await.unwrap()["checks"], json!([watch]));
        wait_until(|| checks(&s.monitor) == before + 1).await;
    }
    let url = format!("{}/api/v1/watches/run:nope/check", s.base);
    let response = support::http().post(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(response.status(), 404);
    run.cancel();
}

/// A Distribution hook for `demo/b:latest`, sent with the token.
async fn hook_latest(base: &str) {
    let body = json!({ "events": [{ "action": "push", "target": { "repository": "demo/b", "tag": "latest" } }] });
    let response = support::http()
        .post(format!("{base}/hooks/distribution"))
        .bearer_auth(TOKEN)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
}

/// The `HEAD`s of the tag `demo/b:latest` the proxy forwarded, oldest first.
fn tag_heads(proxy: &Proxy) -> Vec<Instant> {
    let seen = proxy.seen();
    seen.iter().filter(|r| r.method == "HEAD" && r.path.ends_with("/demo/b/manifests/latest")).map(|r| r.at).collect()
}

#[tokio::test]
async fn a_hook_for_an_unchanged_tag_costs_three_heads_and_a_burst_of_hooks_no_more() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let s = serve(&config(&proxy.host, "")).await;
    let run = CancellationToken::new();
    tokio::spawn(s.monitor.clone().run(run.clone()));
    let checks = |m: &Monitor| m.handle().metrics().checks_of("b", None);
    wait_until(|| checks(&s.monitor) == 1).await;
    let handle = s.monitor.handle();

    for burst in [1, 8] {
        proxy.clear();
        let before = checks(&s.monitor);
        // Sent together, so the burst lands while the first check runs (sent one after another
        // on a loaded machine, a late one could land during a follow-up and start the chain over).
        futures::future::join_all((0..burst).map(|_| hook_latest(&s.base))).await;
        wait_until(|| !handle.hook_checks_pending("b")).await;
        let heads = tag_heads(&proxy);
        assert_eq!(heads.len(), 3, "{burst} hook(s): at once, then the two follow-ups");
        assert_eq!(checks(&s.monitor) - before, 3);
        let [first, second] = builder_monitor::monitor::HOOK_FOLLOW_UPS;
        assert!(heads[1] - heads[0] >= first, "{:?}", heads[1] - heads[0]);
        assert!(heads[2] - heads[1] >= second, "{:?}", heads[2] - heads[1]);
    }
    assert!(s.ledger.changes(None, 10).await.unwrap().is_empty());
    run.cancel();
}

#[tokio::test]
async fn a_hook_after_a_move_finds_it_with_one_head() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let s = serve(&config(&proxy.host, "")).await;
    let run = CancellationToken::new();
    tokio::spawn(s.monitor.clone().run(run.clone()));
    let checks = |m: &Monitor| m.handle().metrics().checks_of("b", None);
    wait_until(|| checks(&s.monitor) == 1).await;
    let pushed = pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("2"), Format::Oci).await;
    proxy.clear();
    hook_latest(&s.base).await;
    let handle = s.monitor.handle();
    wait_until(|| !handle.hook_checks_pending("b")).await;
    assert_eq!(tag_heads(&proxy).len(), 1, "the move was seen: no follow-up");
    assert_eq!(checks(&s.monitor), 2);
    let changes = s.ledger.changes(None, 10).await.unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(s.ledger.watch("b").await.unwrap().unwrap().pin.unwrap().digest, pushed.digest);
    run.cancel();
}

#[tokio::test]
async fn hooks_are_rate_limited_per_client() {
    let registry = TestRegistry::start();
    let s = serve(&config(&registry.host, "hooks_per_second = 1")).await;
    let hook = format!("{}/hooks/dockerhub", s.base);
    let body = json!({ "push_data": { "tag": "latest" }, "repository": { "repo_name": "demo/b" } }).to_string();
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(
            support::http().post(&hook).bearer_auth(TOKEN).body(body.clone()).send().await.unwrap().status().as_u16(),
        );
    }
    assert_eq!(codes, [202, 202, 429, 429], "burst of 2 at 1 per second");
}

/// Polls an in-process condition (set by another task) until it holds.
async fn wait_until(condition: impl Fn() -> bool) {
    let deadline = Instant::now() + support::PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "condition never held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// The daemon's log is read by blocking calls while the registry notifies it: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_push_notification_is_detected_within_two_seconds() {
    let ws = Workspace::new();
    // The registry must know the daemon's hook URL before the daemon (which must know the
    // registry) starts: the port is held while the registry picks its own, and released just
    // before the daemon binds it. Another process can still take it in that instant: then both
    // start again on new ports.
    let (registry, mut daemon) = (0..3)
        .find_map(|_| {
            let reservation = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = reservation.local_addr().unwrap().port();
            let hook = format!("http://127.0.0.1:{port}/hooks/distribution");
            let registry = TestRegistry::start_notifying(&hook, TOKEN);
            let text = config(&registry.host, "api_token_env = \"BM_TEST_API_TOKEN\"")
                .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
            let config = ws.config(&text);
            drop(reservation);
            // The daemon listens before anything is pushed, so no notification waits in the registry's retry queue.
            let mut daemon = Daemon::start_with_env(&config, &[("BM_TEST_API_TOKEN", TOKEN)]);
            match daemon.wait_for_or_exit("the first check", |v| v["message"] == "check done") {
                Ok(_) => Some((registry, daemon)),
                Err(_) if daemon.log.iter().any(|l| l.contains("Address already in use")) => None,
                Err(status) => panic!("daemon exited ({status}):\n{}", daemon.log.join("\n")),
            }
        })
        .expect("three ports in a row were taken between release and bind");
    let pusher = Pusher::new(&registry.host);
    pusher.push_index("demo/b", "latest", &[Image::new("amd64"), Image::new("arm64")], Format::Oci).await;
    daemon.wait_for_event("builder.pinned");

    let started = Instant::now();
    let images = [Image::new("amd64").salt("2"), Image::new("arm64").salt("2")];
    let (pushed, _) = pusher.push_index("demo/b", "latest", &images, Format::Oci).await;
    let changed = daemon.wait_for_event("builder.changed");
    let elapsed = started.elapsed();
    assert_eq!(changed["current"]["digest"], pushed.digest);
    // Far below the 1h interval, with room for a loaded CI machine.
    assert!(elapsed < Duration::from_secs(10), "detected after {elapsed:?} with a 1h interval");
    let (status, _) = daemon.terminate();
    assert!(status.success());
}

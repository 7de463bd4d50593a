//! Registry authentication while watching: bearer tokens fetched once per scope and reused (also by
//! concurrent first checks), credentials refused clearly, and basic auth against an htpasswd file.

use super::*;

#[tokio::test]
async fn bearer_tokens_are_fetched_once_and_reused() {
    let tokens = TokenServer::start(Some(("testuser", "testpass")), 300).await;
    let registry = TestRegistry::start_with(Auth::Token { realm: tokens.realm.clone() });
    let pusher = Pusher::with_basic(&registry.host, "testuser", "testpass");
    pusher.push_index("demo/builder", "latest", &amd64_arm64("a", "a"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let before = tokens.fetches();
    // Anonymous pulls: the token server grants pull scope without credentials.
    let setup = Setup::new(&builder_config(&proxy.host, "demo/builder", ""));

    assert!(matches!(setup.check("b").await, CheckOutcome::Pinned { .. }));
    proxy.clear();
    for _ in 0..25 {
        assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    }
    let seen = proxy.seen();
    assert_eq!(seen.len(), 25, "{seen:#?}");
    assert!(seen.iter().all(|s| s.method == "HEAD" && s.status == 200 && s.authorization));
    assert_eq!(tokens.fetches() - before, 1, "one token for the whole run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_checks_of_a_scope_share_one_token() {
    let tokens = TokenServer::start(Some(("testuser", "testpass")), 300).await;
    let registry = TestRegistry::start_with(Auth::Token { realm: tokens.realm.clone() });
    let pusher = Pusher::with_basic(&registry.host, "testuser", "testpass");
    let mut text = builder_config(&registry.host, "demo/builder", "requests_per_second = 0");
    for i in 0..16 {
        pusher
            .push_image("demo/builder", Some(&format!("t{i}")), &Image::new("amd64").salt(&i.to_string()), Format::Oci)
            .await;
        text += &format!("[[builders]]\nname = \"t{i}\"\nimage = \"{}/demo/builder:t{i}\"\n", registry.host);
    }
    let setup = Arc::new(Setup::new(&text));
    let before = tokens.fetches();
    // All sixteen are turned away without a token at once; the token the first 401 leads to must
    // not be thrown away by the others' 401s (each would fetch its own).
    let checks = (0..16).map(|i| {
        let setup = setup.clone();
        tokio::spawn(async move { setup.check(&format!("t{i}")).await })
    });
    for outcome in futures::future::join_all(checks).await {
        assert!(matches!(outcome.unwrap(), CheckOutcome::Pinned { .. }));
    }
    assert_eq!(tokens.fetches() - before, 1, "one token for one repository scope");
}

#[tokio::test]
async fn bearer_token_with_credentials_and_bad_credentials() {
    let tokens = TokenServer::start(Some(("testuser", "testpass")), 300).await;
    let registry = TestRegistry::start_with(Auth::Token { realm: tokens.realm.clone() });
    let pusher = Pusher::with_basic(&registry.host, "testuser", "testpass");
    pusher.push_image("demo/app", Some("latest"), &Image::new("amd64"), Format::Oci).await;

    let ok = Setup::new(&builder_config(
        &registry.host,
        "demo/app",
        "username = \"testuser\"\npassword_file = \"password\"\n",
    ));
    assert!(matches!(ok.check("b").await, CheckOutcome::Pinned { .. }));

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("wrong"), "nope").unwrap();
    let text = builder_config(
        &registry.host,
        "demo/app",
        &format!("username = \"testuser\"\npassword_file = \"{}\"\n", dir.path().join("wrong").display()),
    );
    let bad = Setup::new(&text);
    match bad.check("b").await {
        CheckOutcome::Failed(err) => {
            assert_eq!(err.reason(), "unauthorized");
            assert!(!err.to_string().contains("nope"), "no secret in errors: {err}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(bad.event_types().await, ["check.failed"]);
}

#[tokio::test]
async fn basic_auth_with_htpasswd() {
    let registry = TestRegistry::start_with(Auth::Htpasswd);
    let pusher = Pusher::with_basic(&registry.host, "testuser", "testpass");
    pusher.push_image("demo/app", Some("latest"), &Image::new("amd64"), Format::Docker).await;
    let proxy = Proxy::start(&registry.host).await;
    let setup =
        Setup::new(&builder_config(&proxy.host, "demo/app", "username = \"testuser\"\npassword_file = \"password\"\n"));

    assert!(matches!(setup.check("b").await, CheckOutcome::Pinned { .. }));
    proxy.clear();
    for _ in 0..10 {
        assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    }
    let seen = proxy.seen();
    assert_eq!(seen.len(), 10, "{seen:#?}");
    assert!(seen.iter().all(|s| s.method == "HEAD" && s.status == 200 && s.authorization));

    // Each refusal names the fix, with the registry's own table name.
    let table = format!("[registries.\"{}\"]", registry.host);
    let anonymous = Setup::new(&builder_config(&registry.host, "demo/app", ""));
    match anonymous.check("b").await {
        CheckOutcome::Failed(err) => {
            assert_eq!(err.reason(), "unauthorized", "{err}");
            assert!(err.to_string().contains(&format!("set them in {table}")), "{err}");
        }
        other => panic!("{other:?}"),
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("wrong"), "nope").unwrap();
    let wrong = format!("username = \"testuser\"\npassword_file = \"{}\"\n", dir.path().join("wrong").display());
    match Setup::new(&builder_config(&registry.host, "demo/app", &wrong)).check("b").await {
        CheckOutcome::Failed(err) => {
            assert!(err.to_string().contains(&format!("check the username and password in {table}")), "{err}");
            assert!(!err.to_string().contains("nope"), "{err}");
        }
        other => panic!("{other:?}"),
    }
}

//! The check's manifest `HEAD` on the direct client (src/registry/endpoint/direct.rs), not
//! reqwest: anonymous, with basic auth and with a token server's bearer tokens (the 401 challenge
//! flow through it), the same headers and digest reqwest's path gives.

use super::*;
use builder_monitor::config::{CredentialSource, Credentials, RegistrySettings, Secret};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;

/// HEADs `repo:latest` on `host` three times; the digest each answered.
async fn heads(registry: &Registry, host: &str, repo: &str) -> Vec<String> {
    let image = ImageRef::parse(&format!("{host}/{repo}:latest")).unwrap();
    let mut digests = Vec::new();
    for _ in 0..3 {
        digests.push(registry.head_manifest(&image).await.unwrap().digest);
    }
    digests
}

fn registry(host: &str, credentials: Credentials) -> Registry {
    builder_monitor::install_crypto_provider();
    let mut settings = RegistrySettings::defaults_for(host);
    settings.credentials = credentials;
    settings.requests_per_second = None;
    Registry::new([settings], Metrics::new())
}

fn basic() -> Credentials {
    Credentials::Basic {
        username: "testuser".into(),
        password: Secret::new("testpass"),
        source: CredentialSource::Env("TEST_PASSWORD".into()),
    }
}

#[tokio::test]
async fn the_checks_head_goes_on_the_direct_client_anonymous_basic_and_token() {
    let tokens = TokenServer::start(Some(("testuser", "testpass")), 300).await;
    for (what, auth, credentials) in [
        ("anonymous", Auth::Anonymous, Credentials::Anonymous),
        ("basic", Auth::Htpasswd, basic()),
        ("token", Auth::Token { realm: tokens.realm.clone() }, basic()),
    ] {
        let target = TestRegistry::start_with(auth);
        let pusher = Pusher::with_basic(&target.host, "testuser", "testpass");
        let pushed = pusher.push_image("demo/app", Some("latest"), &Image::new("amd64"), Format::Oci).await;
        let proxy = Proxy::start(&target.host).await;
        let registry = registry(&proxy.host, credentials);

        assert_eq!(heads(&registry, &proxy.host, "demo/app").await, vec![pushed.digest.clone(); 3], "{what}");
        let seen: Vec<_> = proxy.seen().into_iter().filter(|s| s.method == "HEAD").collect();
        // With auth, the first is turned away with a challenge and sent again with credentials.
        let challenged = usize::from(what != "anonymous");
        assert_eq!(seen.len(), 3 + challenged, "{what}: {seen:#?}");
        assert!(seen[challenged..].iter().all(|s| s.status == 200 && s.authorization == (challenged == 1)), "{what}");
        assert_eq!(registry.direct_heads(&proxy.host), Some(seen.len() as u64), "{what}: all on the direct client");
        // The registry's own log: the same User-Agent as every other request of ours.
        let agent = format!("http.request.useragent={} ", builder_monitor::USER_AGENT);
        let logged: Vec<_> = target.log().into_iter().filter(|l| l.contains("http.request.method=HEAD")).collect();
        assert!(!logged.is_empty() && logged.iter().all(|l| l.contains(&agent)), "{what}: {logged:#?}");
    }
}

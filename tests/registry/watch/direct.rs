//! The check's manifest `HEAD` on the direct client (src/registry/endpoint/direct.rs), not
//! reqwest: anonymous, with basic auth and with a token server's bearer tokens (the 401 challenge
//! flow through it), over HTTPS with a `ca_file`; the same headers and digest reqwest's path gives.

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
        let heads_logged = |log: &[String]| log.iter().filter(|l| l.contains("http.request.method=HEAD")).count();
        let log = target.log_once("every answered HEAD", |log| heads_logged(log) >= seen.len() - challenged);
        let logged: Vec<_> = log.into_iter().filter(|l| l.contains("http.request.method=HEAD")).collect();
        assert!(!logged.is_empty() && logged.iter().all(|l| l.contains(&agent)), "{what}: {logged:#?}");
    }
}

/// Over HTTPS with a team's CA as `ca_file`: the direct client and reqwest trust the same roots
/// (one configuration); without the CA neither does.
#[tokio::test]
async fn https_with_a_ca_file_on_the_direct_client_and_reqwest() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = support::keys::tls(dir.path());
    let target = TestRegistry::start_tls(&cert, &key);
    let config = br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#.to_vec();
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":{}}},"layers":[]}}"#,
        support::images::sha256(&config),
        config.len()
    );
    target.seed("demo/app", "latest", &[config], manifest.as_bytes());
    let digest = support::images::sha256(manifest.as_bytes());
    let image = ImageRef::parse(&format!("{}/demo/app:latest", target.host)).unwrap();
    builder_monitor::install_crypto_provider();
    let settings = |ca_pem: Option<Vec<u8>>| {
        let mut settings = RegistrySettings::defaults_for(&target.host);
        settings.insecure = false;
        settings.ca_pem = ca_pem;
        settings.max_attempts = 1;
        settings.requests_per_second = None;
        settings
    };

    let trusting = Registry::new([settings(Some(std::fs::read(&ca).unwrap()))], Metrics::new());
    for _ in 0..3 {
        assert_eq!(trusting.head_manifest(&image).await.unwrap().digest, digest);
    }
    assert_eq!(trusting.direct_heads(&target.host), Some(3), "the HEADs on the direct client");
    // reqwest (a GET) trusts the same CA.
    assert_eq!(trusting.get_manifest(&image, "latest").await.unwrap().digest, digest);

    let strict = Registry::new([settings(None)], Metrics::new());
    let err = strict.head_manifest(&image).await.expect_err("an unknown CA is not trusted");
    assert!(err.to_string().contains("certificate"), "{err}");
    assert_eq!(strict.direct_heads(&target.host), Some(1), "refused on the direct client");
    let err = strict.get_manifest(&image, "latest").await.expect_err("nor by reqwest");
    assert!(err.to_string().contains("certificate"), "{err}");
}

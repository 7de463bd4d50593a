//! The registry client's listings and deletes against the real registries: every tag of a
//! repository across pages (go-containerregistry's registry honours `n` without a `Link`), an
//! unknown repository listed as empty, manifest deletes by digest, and a registry that does not
//! allow deletes (Distribution's default) refused with the setting to change.

use crate::support;

use bytes::Bytes;

use builder_monitor::config::RegistrySettings;
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::{Registry, RegistryError};
use builder_monitor_core::reference::ImageRef;
use support::images::{Format, Image, Pusher};
use support::referrers_registry::ReferrersRegistry;
use support::registry::TestRegistry;

fn client(host: &str) -> Registry {
    builder_monitor::install_crypto_provider();
    let mut settings = RegistrySettings::defaults_for(host);
    settings.requests_per_second = None;
    Registry::new([settings], Metrics::new()).actions()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tag_is_listed_across_pages_and_an_unknown_repository_has_none() {
    let served = ReferrersRegistry::start();
    let pushed =
        Pusher::new(&served.host).push_image("apps/web", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let registry = client(&served.host);
    let image = ImageRef::parse(&format!("{}/apps/web:latest", served.host)).unwrap();
    let manifest = registry.get_manifest(&image, &pushed.digest).await.unwrap();
    // More than one page of 1000: the second is asked for from the last tag seen.
    let tags: Vec<String> = (0..1100).map(|i| format!("t{i:04}")).collect();
    for tag in &tags {
        let bytes = Bytes::from(manifest.bytes.to_vec());
        registry.put_manifest(&image, tag, &manifest.media_type, bytes).await.unwrap();
    }
    let mut listed = registry.list_tags(&image).await.unwrap();
    listed.sort();
    let mut expected = tags.clone();
    expected.push("latest".into());
    expected.sort();
    assert_eq!(listed, expected);

    let unknown = ImageRef::parse(&format!("{}/apps/none:latest", served.host)).unwrap();
    assert_eq!(registry.list_tags(&unknown).await.unwrap(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_is_deleted_by_digest_and_a_registry_without_deletes_names_the_setting() {
    let registry = TestRegistry::start();
    let pushed = Pusher::new(&registry.host).push_image("apps/web", Some("1"), &Image::new("amd64"), Format::Oci).await;
    let client = client(&registry.host);
    let image = ImageRef::parse(&format!("{}/apps/web:1", registry.host)).unwrap();
    assert_eq!(client.list_tags(&image).await.unwrap(), vec!["1".to_string()]);
    assert!(client.delete_manifest(&image, &pushed.digest).await.unwrap(), "deleted");
    assert!(matches!(client.head_manifest(&image).await, Err(RegistryError::NotFound { .. })), "its tag went with it");
    assert!(!client.delete_manifest(&image, &pushed.digest).await.unwrap(), "not there any more");

    let kept = TestRegistry::start_without_deletes();
    let pushed = Pusher::new(&kept.host).push_image("apps/web", Some("1"), &Image::new("amd64"), Format::Oci).await;
    let client = self::client(&kept.host);
    let image = ImageRef::parse(&format!("{}/apps/web:1", kept.host)).unwrap();
    let err = client.delete_manifest(&image, &pushed.digest).await.unwrap_err();
    assert!(matches!(err, RegistryError::Rejected { .. }), "{err:?}");
    assert!(err.to_string().contains("storage: delete: enabled: true"), "{err}");
    assert_eq!(client.head_manifest(&image).await.unwrap().digest, pushed.digest, "nothing was deleted");
}

//! Writes an image digest's signature and attestations as Sigstore bundles stored as its OCI 1.1
//! referrers, so cosign v3's defaults, cosign v2.6 once a digest has a bundle, and other bundle
//! verifiers find and verify them: the empty config and the bundle blobs, the referrer manifests
//! by digest, then the listing: a registry with the referrers
//! API lists it itself; on one without, it is added to the referrers tag schema's index
//! (`sha256-<hex>`), once, keeping every other referrer there, read within bounds. The empty
//! config is uploaded into one repository of a registry and mounted into the others; the blobs go
//! up together, and the index is read while they do.

use bytes::Bytes;
use chrono::{DateTime, Utc};

use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{
    Descriptor, IndexError, MAX_REFERRERS_INDEX_BYTES, OCI_EMPTY, PayloadError, Referrer, Signer, add_referrers,
    referrers_tag,
};

use crate::registry::{OCI_INDEX, OCI_MANIFEST, Registry, RegistryError};

/// Why the bundle referrer was not written (or not listed).
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("cannot sign {0}")]
    Payload(#[from] PayloadError),
    #[error("writing the signature bundles of {digest} to {repository}: {step}: {source}")]
    Registry { digest: String, repository: String, step: &'static str, source: RegistryError },
    #[error("listing the signature bundles of {digest} in {repository}:{tag}: {source}")]
    Index { digest: String, repository: String, tag: String, source: IndexError },
}

/// Writes `signer`'s Sigstore bundle for the image `subject` (its media type, digest and size; only
/// those are used) as a referrer in `image`'s repository, and makes it findable. `created` is the
/// referrer's `org.opencontainers.image.created` (cosign stamps one): give the time recorded for
/// the action, so that a retry writes the same manifest. Idempotent: a retry re-PUTs the same
/// content and lists nothing twice. Returns the referrer manifest's digest.
pub async fn write_bundle_referrer(
    registry: &Registry,
    image: &ImageRef,
    subject: &Descriptor,
    signer: &Signer,
    created: DateTime<Utc>,
) -> Result<String, BundleError> {
    let referrer = Referrer::new(signer, subject, created)?;
    write_referrers(registry, image, subject, std::slice::from_ref(&referrer)).await?;
    Ok(referrer.digest().to_string())
}

/// Writes `referrers` (bundles of `subject`: its signature and attestations) and makes them
/// findable: the blobs and manifests, then, on a registry without the referrers API, one update
/// of the referrers tag index listing all that are not listed yet. Idempotent, like
/// [`write_bundle_referrer`].
///
/// The referrers tag index is read, changed and PUT back; two writers updating the same subject's
/// index at once could drop one's entry (the tag schema has no compare-and-swap): ours are all
/// added in this one update.
pub async fn write_referrers(
    registry: &Registry,
    image: &ImageRef,
    subject: &Descriptor,
    referrers: &[Referrer],
) -> Result<(), BundleError> {
    let tag = referrers_tag(&subject.digest)?;
    let failed = |step: &'static str| {
        let (digest, repository) = (subject.digest.clone(), image.repository().to_string());
        move |source| BundleError::Registry { digest, repository, step, source }
    };
    // The listing is read alongside the uploads once the registry's answer about the referrers
    // API is known (asked once per registry); the first time, after the manifests, as the
    // go-containerregistry registry knows a new repository only once something is in it.
    let known = registry.referrers_api(image.registry());
    let read = || read_listing(registry, image, &subject.digest, &tag);
    let empty = async {
        let empty = Box::pin(registry.put_shared_blob(image, Bytes::from_static(OCI_EMPTY)));
        empty.await.map_err(failed("upload the empty config"))
    };
    let bundles = futures::future::try_join_all(referrers.iter().map(|referrer| async {
        let upload = Box::pin(registry.put_blob(image, Bytes::from(referrer.bundle.clone())));
        upload.await.map_err(failed("upload the bundle"))
    }));
    let early = async {
        match known {
            Some(_) => Box::pin(read()).await.map(Some),
            None => Ok(None),
        }
    };
    let (_, _, early) = futures::try_join!(empty, bundles, early)?;
    let manifests = referrers.iter().map(|referrer| async {
        registry
            .put_manifest(image, referrer.digest(), OCI_MANIFEST, Bytes::from(referrer.manifest.clone()))
            .await
            .map_err(failed("PUT the referrer manifest"))
    });
    futures::future::try_join_all(manifests).await?;
    let listing = match early {
        Some(listing) => listing,
        None => read().await?,
    };
    // On a registry with the referrers API, it lists a manifest with a subject itself, when PUT.
    let Listing::Tag(current) = listing else { return Ok(()) };
    let descriptors: Vec<Descriptor> = referrers.iter().map(|r| r.descriptor.clone()).collect();
    let updated = add_referrers(current.as_deref(), &descriptors).map_err(|source| BundleError::Index {
        digest: subject.digest.clone(),
        repository: image.repository().to_string(),
        tag: tag.clone(),
        source,
    })?;
    if let Some(index) = updated {
        registry
            .put_manifest(image, &tag, OCI_INDEX, Bytes::from(index))
            .await
            .map_err(failed("PUT the referrers tag index"))?;
    }
    Ok(())
}

/// Where a subject's referrers are listed.
enum Listing {
    /// By the registry's referrers API.
    Api,
    /// In the referrers tag schema's index: as read (none yet when `None`).
    Tag(Option<bytes::Bytes>),
}

/// Whether `image`'s registry lists referrers itself, and if not, the referrers tag index `tag` of
/// `subject` as it is now.
async fn read_listing(registry: &Registry, image: &ImageRef, subject: &str, tag: &str) -> Result<Listing, BundleError> {
    let failed = |step: &'static str| {
        let (digest, repository) = (subject.to_string(), image.repository().to_string());
        move |source| BundleError::Registry { digest, repository, step, source }
    };
    if registry.has_referrers_api(image, subject).await.map_err(failed("ask for the referrers API"))? {
        return Ok(Listing::Api);
    }
    match registry.get_manifest_within(image, tag, MAX_REFERRERS_INDEX_BYTES).await {
        Ok(index) => Ok(Listing::Tag(Some(index.bytes))),
        Err(RegistryError::NotFound { .. }) => Ok(Listing::Tag(None)),
        Err(e) => Err(failed("read the referrers tag index")(e)),
    }
}

//! Image references, normalised the way Docker does (`ubuntu` → `docker.io/library/ubuntu:latest`).

use std::fmt;
use std::str::FromStr;

use oci_client::Reference;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef(Reference);

#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ReferenceError(String);

impl ImageRef {
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(ReferenceError("empty reference".into()));
        }
        if trimmed.contains("://") {
            return Err(ReferenceError("a reference has no URL scheme (write registry/repository:tag)".into()));
        }
        Reference::from_str(trimmed).map(Self).map_err(|e| ReferenceError(e.to_string()))
    }

    /// Registry as written in references: `docker.io` for Docker Hub.
    pub fn registry(&self) -> &str {
        self.0.registry()
    }

    /// Host that serves the registry API (`index.docker.io` for Docker Hub).
    pub fn api_host(&self) -> &str {
        self.0.resolve_registry()
    }

    pub fn repository(&self) -> &str {
        self.0.repository()
    }

    pub fn tag(&self) -> Option<&str> {
        self.0.tag()
    }

    pub fn digest(&self) -> Option<&str> {
        self.0.digest()
    }

    /// What a manifest request names: the digest when there is one, else the tag.
    pub fn manifest_reference(&self) -> &str {
        self.digest().or(self.tag()).unwrap_or("latest")
    }

    /// `registry/repository:tag`, without any digest.
    pub fn with_tag_only(&self) -> String {
        format!("{}/{}:{}", self.registry(), self.repository(), self.tag().unwrap_or("latest"))
    }

    /// The immutable reference `registry/repository@digest`.
    pub fn pinned(&self, digest: &str) -> String {
        format!("{}/{}@{}", self.registry(), self.repository(), digest)
    }

    /// The same repository at another digest.
    pub fn at_digest(&self, digest: &str) -> ImageRef {
        ImageRef(self.0.clone_with_digest(digest.to_string()))
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for ImageRef {
    type Err = ReferenceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// `sha256:` followed by 64 lowercase hex digits (the only digest algorithm registries use for manifests).
pub fn is_sha256_digest(text: &str) -> bool {
    text.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_like_docker() {
        let r = ImageRef::parse("ubuntu").unwrap();
        assert_eq!(r.to_string(), "docker.io/library/ubuntu:latest");
        assert_eq!(r.api_host(), "index.docker.io");
        assert_eq!(r.repository(), "library/ubuntu");
        let r = ImageRef::parse("paketobuildpacks/builder-jammy-base").unwrap();
        assert_eq!(r.to_string(), "docker.io/paketobuildpacks/builder-jammy-base:latest");
        let r = ImageRef::parse("heroku/builder:24").unwrap();
        assert_eq!(r.pinned("sha256:ab"), "docker.io/heroku/builder@sha256:ab");
        let r = ImageRef::parse("127.0.0.1:5000/demo/app:v1").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.api_host(), "127.0.0.1:5000");
        assert_eq!(r.manifest_reference(), "v1");
    }

    #[test]
    fn rejects_nonsense() {
        assert!(ImageRef::parse("").is_err());
        assert!(ImageRef::parse("Not A Reference").is_err());
        assert!(ImageRef::parse("https://ghcr.io/a/b").is_err());
        assert!(ImageRef::parse("a@sha256:123").is_err());
    }

    #[test]
    fn digests() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert!(is_sha256_digest(&d));
        assert!(!is_sha256_digest("sha256:abc"));
        assert!(!is_sha256_digest(&format!("sha256:{}", "A".repeat(64))));
        let r = ImageRef::parse(&format!("ghcr.io/o/r:t@{d}")).unwrap();
        assert_eq!(r.manifest_reference(), d);
        assert_eq!(r.with_tag_only(), "ghcr.io/o/r:t");
    }
}

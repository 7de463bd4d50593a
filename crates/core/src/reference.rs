//! Image references, parsed by the distribution reference grammar and normalised the way Docker
//! does (`ubuntu` → `docker.io/library/ubuntu:latest`). Hand-written: the grammar is small, and the
//! regex other crates compile for it holds ~7 MiB of heap for the life of the process.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

mod prefix;

pub use prefix::{DigestInput, MIN_PREFIX_HEX, PrefixError, resolve as resolve_digest};

/// `registry/repository[:tag][@digest]`; a reference without either gets the tag `latest`.
///
/// Held as its one normalised text, shared, and where each part ends (24 bytes and one allocation,
/// where four strings took 96 bytes and up to four): the daemon keeps one per watched tag for its
/// life, a check's copy of its watch shares it, and so do the records that name the image
/// ([`ImageRef::shared`]).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// `registry/repository[:tag][@digest]`, as displayed.
    text: Arc<str>,
    /// Where the registry ends (the `/` before the repository).
    registry_end: u16,
    /// Where the repository ends.
    repository_end: u16,
    /// Where the tag ends: `repository_end` without one. A digest follows its `@`.
    tag_end: u16,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct ReferenceError(String);

const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_LEGACY: &str = "index.docker.io";
const NAME_MAX: usize = 255;
const TAG_MAX: usize = 128;

fn fail<T>(message: impl Into<String>) -> Result<T, ReferenceError> {
    Err(ReferenceError(message.into()))
}

/// `[a-zA-Z0-9]` or `[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]`.
fn is_domain_component(text: &str) -> bool {
    let b = text.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
}

/// `host[:port]`, host being dot-separated components or a bracketed IPv6 address.
fn check_domain(domain: &str) -> Result<(), ReferenceError> {
    let (host, port) = match domain.strip_prefix('[') {
        Some(rest) => {
            let Some((address, after)) = rest.split_once(']') else {
                return fail(format!("registry \"{domain}\" opens an IPv6 bracket it does not close"));
            };
            if address.parse::<std::net::Ipv6Addr>().is_err() {
                return fail(format!("registry \"{domain}\": \"{address}\" is not an IPv6 address"));
            }
            match after {
                "" => (None, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (None, Some(port)),
                    None => return fail(format!("registry \"{domain}\": expected :PORT after the address")),
                },
            }
        }
        None => match domain.split_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(domain), None),
        },
    };
    if let Some(host) = host
        && !host.split('.').all(is_domain_component)
    {
        return fail(format!(
            "registry \"{domain}\" is not a host name (letters, digits and inner dashes, dot-separated)"
        ));
    }
    if let Some(port) = port
        && (port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        return fail(format!("registry \"{domain}\": port \"{port}\" is not a number"));
    }
    Ok(())
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`.
fn is_path_component(text: &str) -> bool {
    let b = text.as_bytes();
    if b.is_empty() || !is_lower_alnum(b[0]) || !is_lower_alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_lower_alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !is_lower_alnum(b[i]) {
            i += 1;
        }
        let separator = &text[start..i];
        if !(separator == "." || separator == "_" || separator == "__" || separator.bytes().all(|c| c == b'-')) {
            return false;
        }
    }
    true
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[\w][\w.-]{0,127}`.
fn check_tag(tag: &str) -> Result<(), ReferenceError> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let b = tag.as_bytes();
    if b.is_empty() {
        return fail("empty tag after \":\"");
    }
    if b.len() > TAG_MAX || !word(b[0]) || !b.iter().all(|&c| word(c) || c == b'.' || c == b'-') {
        return fail(format!(
            "tag \"{tag}\" is not a tag (up to 128 letters, digits, _, . and -, not starting with . or -)"
        ));
    }
    Ok(())
}

/// `algorithm:hex`, with the hex length the algorithm implies.
fn check_digest(digest: &str) -> Result<(), ReferenceError> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return fail(format!("digest \"{digest}\" has no algorithm (write sha256:...)"));
    };
    let length = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        other => return fail(format!("digest algorithm \"{other}\" is not supported (sha256, sha384, sha512)")),
    };
    if hex.len() != length || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return fail(format!("digest \"{digest}\": {algorithm} takes {length} hex digits"));
    }
    Ok(())
}

impl ImageRef {
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return fail("empty reference");
        }
        if trimmed.contains("://") {
            return fail("a reference has no URL scheme (write registry/repository:tag)");
        }
        let (rest, digest) = match trimmed.split_once('@') {
            Some((rest, digest)) => {
                check_digest(digest)?;
                (rest, Some(digest))
            }
            None => (trimmed, None),
        };
        // A colon after the last slash starts the tag; one before it belongs to a registry port.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let tag = &rest[last_slash + i + 1..];
                check_tag(tag)?;
                (&rest[..last_slash + i], Some(tag))
            }
            None => (rest, None),
        };
        if name.is_empty() {
            return fail("no repository name");
        }
        // Docker's rule: the first component is a registry when it looks like a host.
        let (registry, repository) = match name.split_once('/') {
            Some((first, remainder))
                if first.contains(['.', ':', '['])
                    || first == "localhost"
                    || first.bytes().any(|b| b.is_ascii_uppercase()) =>
            {
                check_domain(first)?;
                (first, remainder.to_string())
            }
            _ => (DOCKER_HUB, name.to_string()),
        };
        let registry = if registry == DOCKER_HUB_LEGACY { DOCKER_HUB } else { registry };
        if let Some(bad) = repository.split('/').find(|c| !is_path_component(c)) {
            return fail(if bad.bytes().any(|b| b.is_ascii_uppercase()) {
                format!("repository \"{repository}\" must be lowercase")
            } else {
                format!(
                    "repository \"{repository}\": \"{bad}\" is not a path component (lowercase letters and digits, joined by ., _, __ or -)"
                )
            });
        }
        let repository = if registry == DOCKER_HUB && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        if registry.len() + 1 + repository.len() > NAME_MAX {
            return fail(format!("name is over {NAME_MAX} characters"));
        }
        let tag = if tag.is_none() && digest.is_none() { Some("latest") } else { tag };
        Ok(ImageRef::from_parts(registry, &repository, tag, digest))
    }

    /// The reference of parts already checked. The name and the tag are bounded (`NAME_MAX`,
    /// `TAG_MAX`), so every offset fits a `u16`; the digest comes last and needs none.
    fn from_parts(registry: &str, repository: &str, tag: Option<&str>, digest: Option<&str>) -> ImageRef {
        let mut text = String::with_capacity(
            registry.len() + 1 + repository.len() + tag.map_or(0, |t| t.len() + 1) + digest.map_or(0, |d| d.len() + 1),
        );
        text.push_str(registry);
        let registry_end = text.len() as u16;
        text.push('/');
        text.push_str(repository);
        let repository_end = text.len() as u16;
        if let Some(tag) = tag {
            text.push(':');
            text.push_str(tag);
        }
        let tag_end = text.len() as u16;
        if let Some(digest) = digest {
            text.push('@');
            text.push_str(digest);
        }
        ImageRef { text: text.into(), registry_end, repository_end, tag_end }
    }

    /// Registry as written in references: `docker.io` for Docker Hub.
    pub fn registry(&self) -> &str {
        &self.text[..usize::from(self.registry_end)]
    }

    /// Host that serves the registry API (`index.docker.io` for Docker Hub).
    pub fn api_host(&self) -> &str {
        let registry = self.registry();
        if registry == DOCKER_HUB { DOCKER_HUB_LEGACY } else { registry }
    }

    pub fn repository(&self) -> &str {
        &self.text[usize::from(self.registry_end) + 1..usize::from(self.repository_end)]
    }

    pub fn tag(&self) -> Option<&str> {
        (self.tag_end > self.repository_end)
            .then(|| &self.text[usize::from(self.repository_end) + 1..usize::from(self.tag_end)])
    }

    pub fn digest(&self) -> Option<&str> {
        self.text.get(usize::from(self.tag_end) + 1..)
    }

    /// The reference as displayed.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The reference as displayed, shared rather than copied.
    pub fn shared(&self) -> Arc<str> {
        self.text.clone()
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

    /// The same repository at another digest (and no tag).
    pub fn at_digest(&self, digest: &str) -> ImageRef {
        ImageRef::from_parts(self.registry(), self.repository(), None, Some(digest))
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// As the four strings it once was (log lines and test failures show it so).
impl fmt::Debug for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImageRef")
            .field("registry", &self.registry())
            .field("repository", &self.repository())
            .field("tag", &self.tag())
            .field("digest", &self.digest())
            .finish()
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

/// A `sha256:` digest as its 32 bytes, where its text takes 71 (and an allocation): the daemon
/// keeps one per watched tag in memory for its life (its steady pin, its metric).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Digest([u8; 32]);

impl Sha256Digest {
    /// The digest `text` names when it is one by [`is_sha256_digest`]: `sha256:` and 64 lowercase
    /// hex digits, so that the text it displays is `text` again. `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix("sha256:")?.as_bytes();
        if hex.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(hex.chunks_exact(2)) {
            *byte = (lower_hex_value(pair[0])? << 4) | lower_hex_value(pair[1])?;
        }
        Some(Self(bytes))
    }

    /// Whether `text` is this digest's text exactly.
    pub fn is(&self, text: &str) -> bool {
        Self::parse(text).is_some_and(|other| other == *self)
    }
}

fn lower_hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = *b"sha256:0000000000000000000000000000000000000000000000000000000000000000";
        for (i, byte) in self.0.iter().enumerate() {
            text[7 + 2 * i] = HEX[usize::from(byte >> 4)];
            text[8 + 2 * i] = HEX[usize::from(byte & 0xf)];
        }
        // Only ASCII was written.
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_is_one_text_and_its_parts() {
        assert_eq!(std::mem::size_of::<ImageRef>(), 24);
        let d = format!("sha256:{}", "c".repeat(64));
        for (text, parts) in [
            ("ghcr.io/o/app:v1", ("ghcr.io", "o/app", Some("v1"), None)),
            ("ghcr.io/o/app", ("ghcr.io", "o/app", Some("latest"), None)),
            (&format!("[::1]:5000/a/b:t@{d}") as &str, ("[::1]:5000", "a/b", Some("t"), Some(d.as_str()))),
            (&format!("ubuntu@{d}"), ("docker.io", "library/ubuntu", None, Some(d.as_str()))),
        ] {
            let r = ImageRef::parse(text).unwrap();
            assert_eq!((r.registry(), r.repository(), r.tag(), r.digest()), parts, "{text}");
            let tag = parts.2.map(|t| format!("Some({t:?})")).unwrap_or("None".into());
            let digest = parts.3.map(|t| format!("Some({t:?})")).unwrap_or("None".into());
            let debug = format!(
                "ImageRef {{ registry: {:?}, repository: {:?}, tag: {tag}, digest: {digest} }}",
                parts.0, parts.1
            );
            assert_eq!(format!("{r:?}"), debug);
        }
        let longest = format!("{}/{}:{}@sha512:{}", "r.io", "a".repeat(250), "t".repeat(128), "f".repeat(128));
        let r = ImageRef::parse(&longest).unwrap();
        assert_eq!((r.to_string(), r.tag().map(str::len)), (longest.clone(), Some(128)));
        let moved = r.at_digest(&d);
        assert_eq!((moved.repository(), moved.tag(), moved.digest()), (r.repository(), None, Some(d.as_str())));
        let copy = moved.clone();
        assert!(Arc::ptr_eq(&copy.shared(), &moved.shared()), "a copy shares the text");
        assert_eq!(&*copy.shared(), moved.to_string());
    }

    #[test]
    fn a_sha256_digest_round_trips_exactly_and_anything_else_is_refused() {
        let text = "sha256:0123456789abcdef00ff10e0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0";
        let digest = Sha256Digest::parse(text).unwrap();
        assert_eq!(digest.to_string(), text);
        assert!(digest.is(text));
        assert!(!digest.is(&text.replace("b0", "b1")));
        assert_eq!(std::mem::size_of::<Sha256Digest>(), 32);
        for bad in [
            "",
            "sha256:",
            &text.to_uppercase(),
            &text.replace("sha256:0123", "sha256:0ABC"),
            &text[..70],
            &format!("{text}0"),
            &text.replace("sha256", "sha512"),
            &format!("sha512:{}", "a".repeat(128)),
            &text.replace("0123", "012g"),
            &text.replace(':', "-"),
        ] {
            assert!(Sha256Digest::parse(bad).is_none(), "{bad}");
            assert!(!digest.is(bad), "{bad}");
        }
    }

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
        for (text, says) in [
            ("ghcr.io/Org/app", "must be lowercase"),
            ("ghcr.io/o/app:-x", "is not a tag"),
            ("ghcr.io/o/app:", "empty tag"),
            ("ghcr.io/o/app@md5:abc", "not supported"),
            ("ghcr.io/o/app@sha256", "no algorithm"),
            ("ghcr.io:x/o/app", "is not a number"),
            ("bad_host.io/o/app", "is not a host name"),
            ("[::1/o/app", "does not close"),
            ("ghcr.io/o//app", "is not a path component"),
            ("ghcr.io/o/app-", "is not a path component"),
        ] {
            let err = ImageRef::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
        assert!(ImageRef::parse(&format!("ghcr.io/{}", "a".repeat(250))).is_err());
        assert!(ImageRef::parse(&format!("ghcr.io/o/app:{}", "t".repeat(129))).is_err());
    }

    #[test]
    fn registries_ports_and_tags() {
        let cases = [
            ("localhost/app", "localhost/app:latest", "localhost"),
            ("localhost:5000/app:v1", "localhost:5000/app:v1", "localhost:5000"),
            ("[::1]:5000/o/app:v1", "[::1]:5000/o/app:v1", "[::1]:5000"),
            ("index.docker.io/heroku/builder:24", "docker.io/heroku/builder:24", "index.docker.io"),
            ("docker.io/ubuntu", "docker.io/library/ubuntu:latest", "index.docker.io"),
            ("library/ubuntu:22.04", "docker.io/library/ubuntu:22.04", "index.docker.io"),
            ("Registry/app", "Registry/app:latest", "Registry"),
            ("a/b/c/d:x_y.z-1", "docker.io/a/b/c/d:x_y.z-1", "index.docker.io"),
            ("ghcr.io/o/a__b.c---d", "ghcr.io/o/a__b.c---d:latest", "ghcr.io"),
        ];
        for (text, shown, api) in cases {
            let r = ImageRef::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((r.to_string().as_str(), r.api_host()), (shown, api), "{text}");
            assert_eq!(ImageRef::parse(&r.to_string()).unwrap(), r, "{text} round-trips");
        }
        let d = format!("sha256:{}", "b".repeat(64));
        let r = ImageRef::parse(&format!("ghcr.io/o/r@{d}")).unwrap();
        assert_eq!((r.tag(), r.to_string()), (None, format!("ghcr.io/o/r@{d}")));
        let moved = ImageRef::parse("ghcr.io/o/r:t").unwrap().at_digest(&d);
        assert_eq!(moved.to_string(), format!("ghcr.io/o/r@{d}"));
    }

    mod agrees_with_the_regex_grammar {
        use super::*;
        use proptest::prelude::*;

        fn component() -> impl Strategy<Value = String> {
            "[a-z0-9]{1,4}(([._]|__|-{1,2})[a-z0-9]{1,3}){0,2}"
        }

        fn reference() -> impl Strategy<Value = String> {
            let registry = prop_oneof![
                Just(String::new()),
                Just("localhost/".to_string()),
                "[a-z][a-z0-9-]{0,5}[a-z0-9]\\.(io|com)(:[0-9]{1,5})?/",
            ];
            let tag = prop_oneof![Just(String::new()), ":[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}"];
            let digest = prop_oneof![Just(String::new()), "@sha256:[a-f0-9]{64}"];
            (registry, proptest::collection::vec(component(), 1..4), tag, digest)
                .prop_map(|(r, path, t, d)| format!("{r}{}{t}{d}", path.join("/")))
        }

        /// The oracle takes a first component with a dot for a registry without checking it is a host
        /// name (`a.b_c/x`); Docker refuses such references, and so do we.
        fn oracle_skips_host_check(text: &str) -> bool {
            text.split_once('/').is_some_and(|(first, _)| {
                first.contains('.') && !first.split(':').next().unwrap_or("").split('.').all(is_domain_component)
            })
        }

        proptest! {
            #[test]
            fn valid_references(text in reference()) {
                if oracle_skips_host_check(&text) {
                    prop_assert!(ImageRef::parse(&text).is_err());
                    return Ok(());
                }
                let ours = ImageRef::parse(&text).unwrap();
                let oracle: oci_client::Reference = text.parse().unwrap();
                prop_assert_eq!(ours.to_string(), oracle.to_string());
                prop_assert_eq!(ours.api_host(), oracle.resolve_registry());
            }

            #[test]
            fn arbitrary_text(text in "[a-zA-Z0-9:/@._-]{0,40}") {
                // Docker reads an uppercase first component as a registry; the oracle does not.
                let uppercase_registry = text.split_once('/').is_some_and(|(f, _)| f.bytes().any(|b| b.is_ascii_uppercase()));
                if uppercase_registry {
                    return Ok(());
                }
                let oracle = text.parse::<oci_client::Reference>();
                match ImageRef::parse(&text) {
                    Ok(ours) => {
                        let oracle = oracle.expect("we accept only what the grammar accepts");
                        prop_assert_eq!(ours.to_string(), oracle.to_string());
                    }
                    Err(ours) => prop_assert!(
                        oracle.is_err() || oracle_skips_host_check(&text),
                        "{text:?}: we refuse ({ours}), the grammar accepts"
                    ),
                }
            }
        }
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

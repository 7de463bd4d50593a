//! Short digests as input: the `sha256:0123456789ab` people see in `status`, `plan` and the page
//! (and the bare hex), taken wherever a digest is asked for, and resolved against the digests the
//! caller knows of (its ledger's records, what a registry said). Pure: callers gather candidates.

use super::is_sha256_digest;

/// The fewest hex digits a short digest may have: what human output shows, and enough that two
/// digests of one repository sharing them is most unlikely (a clash is refused, never guessed).
pub const MIN_PREFIX_HEX: usize = 12;

/// A digest as a person typed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DigestInput {
    /// `sha256:` and all 64 hex digits.
    Full(String),
    /// `sha256:` (written or not) and 12 to 63 lowercase hex digits, kept as `sha256:HEX`.
    Prefix(String),
}

impl DigestInput {
    /// `text` as a digest or a short one; `None` when it is neither (too short, not hex, another
    /// algorithm). Upper-case hex is read as lower case, as digests are written.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim().to_ascii_lowercase();
        if is_sha256_digest(&text) {
            return Some(DigestInput::Full(text));
        }
        let hex = text.strip_prefix("sha256:").unwrap_or(&text);
        let is_hex = hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !is_hex || !(MIN_PREFIX_HEX..64).contains(&hex.len()) {
            return None;
        }
        Some(DigestInput::Prefix(format!("sha256:{hex}")))
    }

    /// The text it stands for: the digest, or its `sha256:` prefix.
    pub fn as_str(&self) -> &str {
        match self {
            DigestInput::Full(d) | DigestInput::Prefix(d) => d,
        }
    }
}

/// Why a short digest names no one digest among the candidates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    #[error("{prefix} matches none of {within}")]
    NoMatch { prefix: String, within: String },
    #[error("{prefix} is ambiguous: it matches {} of {within}: {}; give more digits", candidates.len(), candidates.join(", "))]
    Ambiguous { prefix: String, within: String, candidates: Vec<String> },
}

/// The one digest among `candidates` that `input` names: a full digest is itself (whether listed
/// or not: the caller decides what an unknown one means); a prefix must start exactly one distinct
/// candidate. `within` says what the candidates are (`the digests recorded for web`), for the error.
pub fn resolve<'a>(
    input: &DigestInput,
    candidates: impl IntoIterator<Item = &'a str>,
    within: &str,
) -> Result<String, PrefixError> {
    let prefix = match input {
        DigestInput::Full(digest) => return Ok(digest.clone()),
        DigestInput::Prefix(prefix) => prefix,
    };
    let mut found: Vec<String> = Vec::new();
    for c in candidates {
        if c.starts_with(prefix.as_str()) && is_sha256_digest(c) && !found.iter().any(|f| f == c) {
            found.push(c.to_string());
        }
    }
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(PrefixError::NoMatch { prefix: prefix.clone(), within: within.to_string() }),
        _ => Err(PrefixError::Ambiguous { prefix: prefix.clone(), within: within.to_string(), candidates: found }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(hex: &str) -> String {
        format!("sha256:{hex}{}", "0".repeat(64 - hex.len()))
    }

    #[test]
    fn twelve_hex_digits_or_more_are_a_short_digest() {
        let full = digest("381ddec2a63e");
        assert_eq!(DigestInput::parse(&full), Some(DigestInput::Full(full.clone())));
        assert_eq!(DigestInput::parse("sha256:381ddec2a63e"), Some(DigestInput::Prefix("sha256:381ddec2a63e".into())));
        assert_eq!(DigestInput::parse("381DDEC2A63E"), Some(DigestInput::Prefix("sha256:381ddec2a63e".into())));
        for refused in ["sha256:381ddec2a63", "381ddec2a63", "latest", "sha256:381ddec2a63g", "sha512:381ddec2a63e", ""]
        {
            assert_eq!(DigestInput::parse(refused), None, "{refused}");
        }
    }

    #[test]
    fn a_prefix_names_one_candidate_or_is_refused_listing_them() {
        let (a, b, c) = (digest("381ddec2a63e1"), digest("381ddec2a63e2"), digest("3681161cd3cf"));
        let candidates = [a.as_str(), b.as_str(), c.as_str(), c.as_str()];
        let short = |p: &str| DigestInput::parse(p).unwrap();
        assert_eq!(resolve(&short("sha256:3681161cd3cf"), candidates, "the digests recorded for web"), Ok(c.clone()));
        assert_eq!(resolve(&short("381ddec2a63e2"), candidates, "the digests recorded for web"), Ok(b.clone()));
        let err = resolve(&short("sha256:381ddec2a63e"), candidates, "the digests recorded for web").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "sha256:381ddec2a63e is ambiguous: it matches 2 of the digests recorded for web: {a}, {b}; give more digits"
            )
        );
        let err = resolve(&short("sha256:000000000000"), candidates, "the digests recorded for web").unwrap_err();
        assert_eq!(err.to_string(), "sha256:000000000000 matches none of the digests recorded for web");
        // A full digest stands for itself, listed or not.
        let other = digest("ff");
        assert_eq!(resolve(&DigestInput::parse(&other).unwrap(), candidates, "x"), Ok(other));
    }
}

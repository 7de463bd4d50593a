//! What a move fixes, as an OpenVEX v0.2.0 document about one digest builder-monitor wrote: one
//! statement per vulnerability the move's fixes name (a CVE; a notice naming none stands for
//! itself), status `fixed`, the product the digest as a `pkg:oci` purl with the binary packages
//! the fix moved as `pkg:deb` subcomponents, and the vulnerability data's source and age in each
//! statement's `status_notes`. Only the move's claimed fixes are `fixed`: what the matching could
//! not claim (a package list cut at its cap, an index whose platforms are not all fixed) is
//! `under_investigation`, never `fixed`. Pure, with no clock: the same facts and time give the
//! same bytes, so a retry attests what the first attempt did.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{DataSource, Fix, UnknownFix};

/// OpenVEX v0.2.0's context, the document's `@context` (attested with predicate type
/// [`crate::signing::OPENVEX_PREDICATE_TYPE`], the unversioned namespace cosign matches).
pub const OPENVEX_V0_2_0: &str = "https://openvex.dev/ns/v0.2.0";

/// What a move fixed, carried from its decision to the signing of the digests it leads to: the
/// claimed fixes, those not claimed with why, where the data came from and the image's release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VexFacts {
    /// The change (the move) whose fixes these are.
    pub change: String,
    /// The notices the move fixes on every platform's full package list.
    pub fixes: Vec<Fix>,
    /// Notices some platform showed fixed that are not claimed, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<UnknownFix>,
    /// Where the data came from and when it was last known current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<DataSource>,
    /// The new image's OSV ecosystem (`Ubuntu:22.04:LTS`), when one for all its platforms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
}

impl VexFacts {
    /// The facts of a move that claims a fix; `None` when it claims none (then nothing is
    /// attested). What the ledger keeps is trimmed to what a document says (no copies of records).
    pub fn of(
        change: &str,
        fixes: &[Fix],
        unknown: &[UnknownFix],
        source: Option<&DataSource>,
        release: Option<&str>,
    ) -> Option<Self> {
        if fixes.is_empty() {
            return None;
        }
        let trimmed = fixes.iter().map(|f| Fix { ignored: Vec::new(), priority_from: Vec::new(), ..f.clone() });
        Some(VexFacts {
            change: change.to_string(),
            fixes: trimmed.collect(),
            unknown: unknown.to_vec(),
            source: source.cloned(),
            release: release.map(str::to_string),
        })
    }
}

/// The image written, as the document names it.
#[derive(Debug, Clone, Copy)]
pub struct Product<'a> {
    /// `<registry>/<repository>`.
    pub repository: &'a str,
    /// `sha256:<hex>`.
    pub digest: &'a str,
}

/// Who wrote the document, and when.
#[derive(Debug, Clone, Copy)]
pub struct Authored<'a> {
    /// When the action was planned: the same on every attempt.
    pub timestamp: DateTime<Utc>,
    /// builder-monitor's version.
    pub version: &'a str,
}

/// `pkg:oci/<name>@sha256%3A<hex>?repository_url=<registry>/<repository>`: the image at a digest
/// as Trivy names the image it scans; `None` for a digest that is not sha256.
pub fn oci_purl(product: Product<'_>) -> Option<String> {
    let hex =
        product.digest.strip_prefix("sha256:").filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))?;
    let name = product.repository.rsplit('/').next().unwrap_or(product.repository).to_ascii_lowercase();
    Some(format!("pkg:oci/{}@sha256%3A{hex}?repository_url={}", encode(&name), product.repository))
}

/// `pkg:deb/ubuntu/<name>@<version>?distro=ubuntu-22.04&epoch=1` (qualifiers sorted; the epoch a
/// qualifier, as Trivy writes Debian purls; no `distro` when the release is not known).
pub fn deb_purl(name: &str, version: &str, release: Option<&str>) -> String {
    let (epoch, upstream) = match version.split_once(':') {
        Some((epoch, rest)) if !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_digit()) => (Some(epoch), rest),
        _ => (None, version),
    };
    let mut qualifiers = Vec::new();
    if let Some(distro) = release.and_then(distro) {
        qualifiers.push(format!("distro={distro}"));
    }
    if let Some(epoch) = epoch {
        qualifiers.push(format!("epoch={epoch}"));
    }
    let mut purl = format!("pkg:deb/ubuntu/{}@{}", encode(name), encode(upstream));
    if !qualifiers.is_empty() {
        purl.push('?');
        purl.push_str(&qualifiers.join("&"));
    }
    purl
}

/// `ubuntu-22.04` of the OSV ecosystem `Ubuntu:22.04:LTS`; `None` for another shape (Pro's).
fn distro(release: &str) -> Option<String> {
    let mut parts = release.split(':');
    let (name, version) = (parts.next()?, parts.next()?);
    let plain = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.');
    (plain(name) && plain(version) && version.bytes().next().is_some_and(|b| b.is_ascii_digit()))
        .then(|| format!("{}-{version}", name.to_ascii_lowercase()))
}

/// Percent-encodes all but purl's unreserved characters (`+` becomes `%2B`).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One vulnerability's statement, as gathered from the fixes that name it.
#[derive(Default)]
struct Gathered {
    /// The notices that name it, other than itself.
    aliases: BTreeSet<String>,
    /// `(binary, from, to)` the fixes moved.
    packages: BTreeSet<(String, String, String)>,
    /// `USN-7000-1 (record modified …)` per notice.
    records: BTreeSet<String>,
    /// Why it is not claimed, when it is not.
    unclaimed: Vec<String>,
}

/// The OpenVEX document of what `facts`' move fixes in `product`, or `None` when it claims no
/// vulnerability `fixed` (nothing is attested then). Statements are sorted by vulnerability.
pub fn document(facts: &VexFacts, product: Product<'_>, authored: Authored<'_>) -> Option<Value> {
    let image = oci_purl(product)?;
    let mut gathered: BTreeMap<String, Gathered> = BTreeMap::new();
    for fix in &facts.fixes {
        let names: Vec<String> = if fix.cves.is_empty() { vec![fix.id.clone()] } else { fix.cves.clone() };
        for name in &names {
            let entry = gathered.entry(name.clone()).or_default();
            if !names.contains(&fix.id) {
                entry.aliases.insert(fix.id.clone());
            }
            entry.packages.extend(fix.packages.iter().map(|p| (p.name.clone(), p.from.clone(), p.to.clone())));
            entry.records.insert(match &fix.modified {
                Some(modified) => format!("{} (record modified {modified})", fix.id),
                None => fix.id.clone(),
            });
        }
    }
    // Never `fixed` where the matching had a doubt about it, even when another record claims it.
    for unknown in &facts.unknown {
        gathered.entry(unknown.id.clone()).or_default().unclaimed.push(unknown.reason.clone());
    }
    if gathered.values().all(|g| !g.unclaimed.is_empty()) {
        return None;
    }
    let data = data_note(facts.source.as_ref(), authored.timestamp);
    let statements: Vec<Value> =
        gathered.into_iter().map(|(name, g)| statement(&name, g, &image, facts.release.as_deref(), &data)).collect();
    let hex = product.digest.trim_start_matches("sha256:");
    Some(json!({
        "@context": OPENVEX_V0_2_0,
        "@id": format!("urn:builder-monitor:openvex:{}:{hex}", facts.change),
        "author": "builder-monitor",
        "timestamp": authored.timestamp.to_rfc3339_opts(SecondsFormat::Secs, true),
        "version": 1,
        "tooling": format!("builder-monitor {}", authored.version),
        "statements": statements,
    }))
}

/// One statement: `fixed` with the packages as subcomponents, or `under_investigation` with why.
fn statement(name: &str, g: Gathered, image: &str, release: Option<&str>, data: &str) -> Value {
    let mut vulnerability = json!({"name": name});
    if !g.aliases.is_empty() {
        vulnerability["aliases"] = json!(g.aliases);
    }
    let mut product = json!({"@id": image});
    if !g.packages.is_empty() {
        let subcomponents: Vec<Value> =
            g.packages.iter().map(|(binary, _, to)| json!({"@id": deb_purl(binary, to, release)})).collect();
        product["subcomponents"] = json!(subcomponents);
    }
    let moved: Vec<String> = g.packages.iter().map(|(binary, from, to)| format!("{binary} {from} → {to}")).collect();
    let records = g.records.iter().cloned().collect::<Vec<_>>().join(", ");
    let (status, notes) = if g.unclaimed.is_empty() {
        let notes = format!(
            "fixed by the base-image move to this digest ({}), per {records}; {data}",
            if moved.is_empty() { "no package version moved".to_string() } else { moved.join(", ") }
        );
        ("fixed", notes)
    } else {
        ("under_investigation", format!("not claimed fixed: {}; {data}", g.unclaimed.join("; ")))
    };
    json!({"vulnerability": vulnerability, "products": [product], "status": status, "status_notes": notes})
}

/// `vulnerability data: <url> (sha256 …, ETag …), current as of <time>, N h before this document`.
fn data_note(source: Option<&DataSource>, timestamp: DateTime<Utc>) -> String {
    let Some(source) = source else { return "vulnerability data: source not recorded".into() };
    let mut out = format!("vulnerability data: {}", source.url);
    let details: Vec<String> =
        [source.sha256.as_ref().map(|s| format!("sha256 {s}")), source.etag.as_ref().map(|e| format!("ETag {e}"))]
            .into_iter()
            .flatten()
            .collect();
    if !details.is_empty() {
        out.push_str(&format!(" ({})", details.join(", ")));
    }
    match source.as_of {
        Some(at) => {
            let hours = (timestamp - at).num_hours().max(0);
            out.push_str(&format!(
                ", current as of {}, {hours} h before this document",
                at.to_rfc3339_opts(SecondsFormat::Secs, true)
            ));
        }
        None => out.push_str(", age not recorded"),
    }
    if let Some(why) = &source.unverified {
        out.push_str(&format!("; not verified: {why}"));
    }
    out
}

#[cfg(test)]
#[path = "openvex_tests.rs"]
mod tests;

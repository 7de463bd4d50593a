//! Reading package lists: the Paketo label, the three SBOM formats, and where in an image config
//! the list is. Lists are read entry by entry and counted as they come: at entry 5,001 (past
//! [`MAX_PACKAGES`]; an empty `{}` counts) the read stops, the rest of the document unread, and the
//! list is the packages of the first 5,000 entries, marked cut (`cut_at`) so every pin and change
//! made from it says so. Fields this crate does not use are skipped (`IgnoredAny`), never built.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use serde::de::DeserializeSeed;

use super::{BASE_SBOM, MAX_PACKAGES, PAKETO_PACKAGES, Package, PackageList, Packages, Source};
use crate::text::escape;

/// Longest package name, version or arch kept (real ones: well under 100 bytes). A longer one
/// refuses the list: 5,000 entries of this size are at most ~15 MiB in memory.
pub const MAX_FIELD_BYTES: usize = 1 << 10;

/// Starts the serde error of a limit, so it is told apart from malformed JSON (and reported
/// without serde's line and column).
const LIMIT: &str = "limit: ";

fn limit<E: de::Error>(what: fmt::Arguments<'_>) -> E {
    E::custom(format_args!("{LIMIT}{what}"))
}

/// Why a document was refused: over a limit (`lists more than 5000 packages, …`), unreadable (the
/// reader failed), or malformed.
fn refusal(what: &str, err: serde_json::Error) -> String {
    let message = err.to_string();
    if let Some(rest) = message.strip_prefix(LIMIT) {
        // serde_json appends " at line L column C" to a visitor's error.
        let why = rest.rsplit_once(" at line ").map_or(rest, |(why, _)| why);
        return format!("{what} {why}");
    }
    if err.is_io() {
        return format!("{what} could not be read: {message}");
    }
    format!("{what} is malformed: {message}")
}

/// A name, version or arch: at most [`MAX_FIELD_BYTES`].
struct Field(String);

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                if v.len() > MAX_FIELD_BYTES {
                    return Err(limit(format_args!(
                        "has a package field of {} bytes, over the {MAX_FIELD_BYTES} kept",
                        v.len()
                    )));
                }
                Ok(Field(v.to_string()))
            }
        }
        d.deserialize_str(FieldVisitor)
    }
}

/// The `arch` qualifier of a package URL (`pkg:deb/ubuntu/openssl@3.0.2?arch=amd64&distro=…`),
/// taken while the URL is read: the URL itself is not kept.
struct PurlArch(Option<String>);

fn purl_arch(purl: &str) -> Option<&str> {
    let query = purl.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or(query);
    query.split('&').find_map(|pair| pair.strip_prefix("arch=")).filter(|a| !a.is_empty())
}

impl<'de> Deserialize<'de> for PurlArch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PurlVisitor;
        impl Visitor<'_> for PurlVisitor {
            type Value = PurlArch;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a package URL")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PurlArch, E> {
                let arch = purl_arch(v).map(|a| Field::deserialize(de::value::StrDeserializer::<E>::new(a)));
                Ok(PurlArch(arch.transpose()?.map(|f| f.0)))
            }
        }
        d.deserialize_str(PurlVisitor)
    }
}

/// `referenceType: "purl"`, compared where it is read.
struct IsPurl(bool);

impl<'de> Deserialize<'de> for IsPurl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TypeVisitor;
        impl Visitor<'_> for TypeVisitor {
            type Value = IsPurl;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a reference type")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IsPurl, E> {
                Ok(IsPurl(v == "purl"))
            }
        }
        d.deserialize_str(TypeVisitor)
    }
}

#[derive(Deserialize)]
struct ExternalRef {
    #[serde(default, rename = "referenceType")]
    reference_type: Option<IsPurl>,
    #[serde(default, rename = "referenceLocator")]
    reference_locator: Option<PurlArch>,
}

/// SPDX `externalRefs`: the arch of the first purl reference; the others are read one at a time
/// and dropped.
struct RefsArch(Option<String>);

impl<'de> Deserialize<'de> for RefsArch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RefsVisitor;
        impl<'de> Visitor<'de> for RefsVisitor {
            type Value = RefsArch;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of external references")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RefsArch, A::Error> {
                let mut found: Option<Option<String>> = None;
                while let Some(r) = seq.next_element::<ExternalRef>()? {
                    if found.is_none() && r.reference_type.is_some_and(|t| t.0) {
                        found = Some(r.reference_locator.and_then(|l| l.0));
                    }
                }
                Ok(RefsArch(found.flatten()))
            }
        }
        d.deserialize_seq(RefsVisitor)
    }
}

/// An entry of a list, as the package it names (`None`: no name).
trait Entry: DeserializeOwned {
    fn into_package(self) -> Option<Package>;
}

#[derive(Deserialize)]
struct PaketoEntry {
    name: Field,
    #[serde(default)]
    version: Option<Field>,
    #[serde(default)]
    arch: Option<Field>,
}

impl Entry for PaketoEntry {
    fn into_package(self) -> Option<Package> {
        Some(Package {
            name: Some(self.name.0).filter(|n| !n.is_empty())?,
            arch: self.arch.map(|a| a.0).filter(|a| !a.is_empty()),
            version: self.version.map(|v| v.0).unwrap_or_default(),
        })
    }
}

/// An SBOM entry of any of the three formats (their fields do not collide).
#[derive(Deserialize)]
struct SbomEntry {
    #[serde(default)]
    name: Option<Field>,
    /// CycloneDX, Syft.
    #[serde(default)]
    version: Option<Field>,
    /// SPDX.
    #[serde(default, rename = "versionInfo")]
    version_info: Option<Field>,
    /// CycloneDX, Syft.
    #[serde(default)]
    purl: Option<PurlArch>,
    /// SPDX.
    #[serde(default, rename = "externalRefs")]
    external_refs: Option<RefsArch>,
}

impl Entry for SbomEntry {
    fn into_package(self) -> Option<Package> {
        let name = self.name.map(|n| n.0).filter(|n| !n.is_empty())?;
        let arch = match self.purl {
            Some(purl) => purl.0,
            None => self.external_refs.and_then(|r| r.0),
        };
        let version = self.version.or(self.version_info).map(|v| v.0).unwrap_or_default();
        Some(Package { name, arch, version })
    }
}

/// Ends the read of a list at its entry past [`MAX_PACKAGES`]: an error to serde, so nothing after
/// it is read, told apart by the reader from real errors through [`Collected::cut_at`].
const CUT: &str = "the list goes on past its cap";

/// What a list's read collected, kept by the caller so that a read stopped at the cap still
/// yields the packages of the entries before it.
#[derive(Default)]
struct Collected {
    packages: Vec<Package>,
    /// Entries read when the read stopped at the cap.
    cut_at: Option<usize>,
    /// Whether the document had the list at all.
    found: bool,
}

/// Reads a list of entries into `out`, counted as they are read: at most [`MAX_PACKAGES`] entries
/// are read (each one held only while it is turned into its package), then the read stops.
struct ListSeed<'a, E> {
    out: &'a mut Collected,
    entry: PhantomData<E>,
}

impl<'de, E: Entry> DeserializeSeed<'de> for ListSeed<'_, E> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, E: Entry> Visitor<'de> for ListSeed<'_, E> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of packages")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        // A list named twice in a document: the last one counts, as serde would have it.
        *self.out = Collected { found: true, ..Collected::default() };
        let mut entries = 0usize;
        while entries < MAX_PACKAGES {
            let Some(entry) = seq.next_element::<E>()? else { return Ok(()) };
            entries += 1;
            self.out.packages.extend(entry.into_package());
        }
        // One more entry (even `{}`) is skipped unbuilt to tell a full list from a cut one.
        if seq.next_element::<IgnoredAny>()?.is_none() {
            return Ok(());
        }
        self.out.cut_at = Some(MAX_PACKAGES);
        Err(de::Error::custom(CUT))
    }
}

/// An SBOM document of one format: its list (`field`) read with [`ListSeed`], every other key
/// skipped unread.
struct DocSeed<'a> {
    field: &'static str,
    out: &'a mut Collected,
}

impl<'de> DeserializeSeed<'de> for DocSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DocSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an SBOM document")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'_, str>>()? {
            if key == self.field {
                map.next_value_seed(Nullable(ListSeed::<SbomEntry> { out: &mut *self.out, entry: PhantomData }))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// A list that may be `null` (read as absent).
struct Nullable<S>(S);

impl<'de, S: DeserializeSeed<'de, Value = ()>> DeserializeSeed<'de> for Nullable<S> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de, Value = ()>> Visitor<'de> for Nullable<S> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of packages")
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.0.deserialize(d)
    }
}

/// The outcome of a read into `out`: the list (cut when the read stopped at the cap), or why not.
fn finish(what: &str, read: Result<(), serde_json::Error>, out: Collected) -> Result<PackageList, String> {
    match read {
        Err(_) if out.cut_at.is_some() => {}
        Err(e) => return Err(refusal(what, e)),
        Ok(()) => {}
    }
    Ok(PackageList { packages: normalized(out.packages), cut_at: out.cut_at })
}

/// Sorted, one entry per (name, arch): a name listed twice with different versions keeps them all,
/// joined, so the list stays a function of the document.
fn normalized(mut packages: Vec<Package>) -> Vec<Package> {
    packages.sort();
    packages.dedup();
    let mut out: Vec<Package> = Vec::with_capacity(packages.len());
    for p in packages {
        match out.last_mut() {
            Some(last) if last.name == p.name && last.arch == p.arch => {
                if last.version != p.version {
                    last.version.push_str(", ");
                    last.version.push_str(&p.version);
                }
            }
            _ => out.push(p),
        }
    }
    out
}

/// The `io.paketo.stack.packages` label's value.
pub fn parse_paketo_label(value: &str) -> Result<PackageList, String> {
    let mut out = Collected::default();
    let mut de = serde_json::Deserializer::from_str(value);
    let read =
        ListSeed::<PaketoEntry> { out: &mut out, entry: PhantomData }.deserialize(&mut de).and_then(|()| de.end());
    finish(&format!("label {PAKETO_PACKAGES}"), read, out)
}

/// An SBOM document of `source`'s format (`Source::PaketoLabel` is not one).
pub fn parse_sbom(source: Source, document: &[u8]) -> Result<PackageList, String> {
    parse_sbom_from(source, document)
}

/// An SBOM document of `source`'s format, read as it streams in (from an SBOM layer's tar entry):
/// never more of it in memory than the entries kept, and nothing after a cut list.
pub fn parse_sbom_from(source: Source, document: impl std::io::Read) -> Result<PackageList, String> {
    let what = format!("{} document", source.as_str());
    let field = match source {
        Source::CycloneDx => "components",
        Source::Spdx => "packages",
        Source::Syft => "artifacts",
        Source::PaketoLabel => return Err(format!("{PAKETO_PACKAGES} is a label, not an SBOM document")),
    };
    let mut out = Collected::default();
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(document));
    let read = DocSeed { field, out: &mut out }.deserialize(&mut de).and_then(|()| de.end());
    if read.is_ok() && !out.found {
        return Err(format!("{what} has no \"{field}\" list"));
    }
    finish(&what, read, out)
}

// ---- where the list is ----------------------------------------------------------------------------

/// Where an image's package list is, from its config blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// Read from the config alone (the Paketo label, or why it or the SBOM label is unusable).
    Found(Packages),
    /// In the layer at `position` of the manifest (the `io.buildpacks.base.sbom` diffID's).
    SbomLayer { diff_id: String, position: usize },
    /// The image carries neither label.
    Absent,
}

#[derive(Deserialize, Default)]
struct ConfigDoc {
    #[serde(default)]
    config: Option<ContainerConfig>,
    #[serde(default)]
    rootfs: Option<RootFs>,
}

#[derive(Deserialize, Default)]
struct ContainerConfig {
    #[serde(default, rename = "Labels")]
    labels: Option<ListLabels>,
}

#[derive(Deserialize, Default)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// A label's value: labels are strings, anything else is kept only as "not a string".
enum LabelValue {
    Text(String),
    NotText,
}

impl<'de> Deserialize<'de> for LabelValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ValueVisitor;
        impl<'de> Visitor<'de> for ValueVisitor {
            type Value = LabelValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a label value")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LabelValue, E> {
                Ok(LabelValue::Text(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<LabelValue, E> {
                Ok(LabelValue::NotText)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<LabelValue, E> {
                Ok(LabelValue::NotText)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<LabelValue, E> {
                Ok(LabelValue::NotText)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<LabelValue, E> {
                Ok(LabelValue::NotText)
            }
            fn visit_unit<E: de::Error>(self) -> Result<LabelValue, E> {
                Ok(LabelValue::NotText)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LabelValue, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(LabelValue::NotText)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LabelValue, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(LabelValue::NotText)
            }
        }
        d.deserialize_any(ValueVisitor)
    }
}

/// The two labels that say where a package list is; every other label is skipped unread.
#[derive(Default)]
struct ListLabels(BTreeMap<&'static str, LabelValue>);

impl<'de> Deserialize<'de> for ListLabels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct LabelsVisitor;
        impl<'de> Visitor<'de> for LabelsVisitor {
            type Value = ListLabels;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of labels")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ListLabels, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(key) = map.next_key::<std::borrow::Cow<'_, str>>()? {
                    match [PAKETO_PACKAGES, BASE_SBOM].into_iter().find(|k| *k == key) {
                        Some(known) => {
                            out.insert(known, map.next_value::<LabelValue>()?);
                        }
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(ListLabels(out))
            }
        }
        d.deserialize_map(LabelsVisitor)
    }
}

/// Where the package list of the image with this config blob is: the Paketo label first (no
/// request), else the SBOM layer the base-image label names.
pub fn lookup(config: &[u8]) -> Lookup {
    let doc: ConfigDoc = match serde_json::from_slice(config) {
        Ok(doc) => doc,
        Err(e) => return Lookup::Found(Packages::unreadable(format!("image config is not valid JSON: {e}"))),
    };
    let labels = doc.config.and_then(|c| c.labels).unwrap_or_default();
    let label = |key: &str| {
        labels.0.get(key).map(|v| match v {
            LabelValue::Text(text) => Ok(text.as_str()),
            LabelValue::NotText => Err(format!("label {key} is not a string")),
        })
    };
    if let Some(value) = label(PAKETO_PACKAGES) {
        let parsed = value.and_then(parse_paketo_label);
        return Lookup::Found(Packages::from_result(Source::PaketoLabel, parsed));
    }
    let Some(value) = label(BASE_SBOM) else { return Lookup::Absent };
    let diff_id = match value {
        Ok(v) => v.trim().to_string(),
        Err(e) => return Lookup::Found(Packages::unreadable(e)),
    };
    let diff_ids = doc.rootfs.map(|r| r.diff_ids).unwrap_or_default();
    match diff_ids.iter().position(|d| *d == diff_id) {
        Some(position) => Lookup::SbomLayer { diff_id, position },
        None => Lookup::Found(Packages::unreadable(format!(
            "label {BASE_SBOM} names {}, which is not a layer of the image",
            escape(&diff_id)
        ))),
    }
}

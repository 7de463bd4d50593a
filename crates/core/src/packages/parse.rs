//! Reading package lists: the Paketo label, the three SBOM formats, and where in an image config
//! the list is. Lists are read entry by entry and counted as they come, so a document past
//! [`MAX_PACKAGES`] entries (an empty `{}` counts) is refused at entry 5,001 without the rest
//! being materialised; fields this crate does not use are skipped (`IgnoredAny`), never built.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{BASE_SBOM, MAX_PACKAGES, PAKETO_PACKAGES, Package, Packages, Source};
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

/// A list of entries, counted as they are read: past [`MAX_PACKAGES`] the read stops with an
/// error, so at most that many entries are ever held (each one only while it is turned into its
/// package).
pub(super) struct Listed<E> {
    pub(super) packages: Vec<Package>,
    entry: PhantomData<E>,
}

impl<'de, E: Entry> Deserialize<'de> for Listed<E> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ListVisitor<E>(PhantomData<E>);
        impl<'de, E: Entry> Visitor<'de> for ListVisitor<E> {
            type Value = Listed<E>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of packages")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Listed<E>, A::Error> {
                let mut packages = Vec::new();
                let mut entries = 0usize;
                while let Some(entry) = seq.next_element::<E>()? {
                    entries += 1;
                    if entries > MAX_PACKAGES {
                        return Err(limit(format_args!(
                            "lists more than {MAX_PACKAGES} packages, over the {MAX_PACKAGES} kept"
                        )));
                    }
                    packages.extend(entry.into_package());
                }
                Ok(Listed { packages, entry: PhantomData })
            }
        }
        d.deserialize_seq(ListVisitor(PhantomData))
    }
}

#[derive(Deserialize)]
struct CycloneDxDoc {
    #[serde(default)]
    components: Option<Listed<SbomEntry>>,
}

#[derive(Deserialize)]
struct SpdxDoc {
    #[serde(default)]
    packages: Option<Listed<SbomEntry>>,
}

#[derive(Deserialize)]
struct SyftDoc {
    #[serde(default)]
    artifacts: Option<Listed<SbomEntry>>,
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
pub fn parse_paketo_label(value: &str) -> Result<Vec<Package>, String> {
    let listed: Listed<PaketoEntry> =
        serde_json::from_str(value).map_err(|e| refusal(&format!("label {PAKETO_PACKAGES}"), e))?;
    Ok(normalized(listed.packages))
}

/// An SBOM document of `source`'s format (`Source::PaketoLabel` is not one).
pub fn parse_sbom(source: Source, document: &[u8]) -> Result<Vec<Package>, String> {
    parse_sbom_from(source, document)
}

/// An SBOM document of `source`'s format, read as it streams in (from an SBOM layer's tar entry):
/// never more of it in memory than the entries kept.
pub fn parse_sbom_from(source: Source, document: impl std::io::Read) -> Result<Vec<Package>, String> {
    let what = format!("{} document", source.as_str());
    let reader = std::io::BufReader::new(document);
    let (entries, field) = match source {
        Source::CycloneDx => (
            serde_json::from_reader::<_, CycloneDxDoc>(reader).map_err(|e| refusal(&what, e))?.components,
            "components",
        ),
        Source::Spdx => {
            (serde_json::from_reader::<_, SpdxDoc>(reader).map_err(|e| refusal(&what, e))?.packages, "packages")
        }
        Source::Syft => {
            (serde_json::from_reader::<_, SyftDoc>(reader).map_err(|e| refusal(&what, e))?.artifacts, "artifacts")
        }
        Source::PaketoLabel => return Err(format!("{PAKETO_PACKAGES} is a label, not an SBOM document")),
    };
    let entries = entries.ok_or_else(|| format!("{what} has no \"{field}\" list"))?;
    Ok(normalized(entries.packages))
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

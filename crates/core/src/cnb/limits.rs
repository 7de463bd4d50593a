//! The size limits of CNB metadata: how much of a config's labels is read (label bytes, entries
//! per list or map) and how much of what was read a pin keeps in the ledger (its JSON budget).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::{MetadataError, PinnedMetadata, PlatformMetadata};
use crate::packages::Packages;

/// Largest `io.buildpacks.*` label value read (a real builder's largest is ~50 KB). A larger one
/// makes the metadata over the limit; it is never copied out of the config blob.
pub const MAX_LABEL_BYTES: usize = 1 << 20;
/// Most entries any list or map in the metadata may have: buildpacks, layers, order groups and
/// their entries, mixins, run images, API versions, env, diff ids (real builders: < 100). Parsing
/// stops at the first entry over it.
pub const MAX_ENTRIES: usize = 2_000;
/// Starts every serde error raised for a limit, so it is told apart from malformed JSON.
pub(super) const OVER_LIMIT: &str = "over the limit: ";

pub(super) fn over_limit<E: serde::de::Error>(what: std::fmt::Arguments<'_>) -> E {
    E::custom(format_args!("{OVER_LIMIT}{what}"))
}

/// A list of at most [`MAX_ENTRIES`] (`null` reads as empty).
pub(super) fn bounded<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct ListVisitor<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for ListVisitor<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<T>, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element()? {
                if out.len() == MAX_ENTRIES {
                    return Err(over_limit(format_args!("a list has more than {MAX_ENTRIES} entries")));
                }
                out.push(item);
            }
            Ok(out)
        }
    }
    d.deserialize_any(ListVisitor(std::marker::PhantomData))
}

/// A map of at most [`MAX_ENTRIES`] (`null` reads as empty).
fn bounded_map<'de, D, V>(d: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de>,
{
    struct MapVisitor<V>(std::marker::PhantomData<V>);
    impl<'de, V: Deserialize<'de>> serde::de::Visitor<'de> for MapVisitor<V> {
        type Value = BTreeMap<String, V>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((key, value)) = map.next_entry::<String, V>()? {
                if out.len() == MAX_ENTRIES {
                    return Err(over_limit(format_args!("a map has more than {MAX_ENTRIES} entries")));
                }
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    d.deserialize_any(MapVisitor(std::marker::PhantomData))
}

/// A label's top-level list or map, bounded like the fields inside it.
pub(super) struct Bounded<T>(pub(super) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Bounded<Vec<T>> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bounded(d).map(Bounded)
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Bounded<BTreeMap<String, V>> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        bounded_map(d).map(Bounded)
    }
}

// ---- what a pin keeps ---------------------------------------------------------------------------

/// Most bytes of JSON the metadata of one pin takes in the ledger (builder platforms, package
/// lists, its run image's lists, notes). Every watch is one ConfigMap (at most 1 MiB) in the
/// Kubernetes ledger, which also holds its history, changes and events; half of it is the pin's.
/// A real two-platform builder with its OS package lists takes ~300 KB.
pub const MAX_PINNED_BYTES: usize = 512 << 10;
/// Kept aside from the budget for the JSON around the pieces (keys, braces, the run image's name).
const FRAME_BYTES: usize = 4 << 10;

/// Bytes of `value` as JSON, counted without building the text.
pub fn json_size<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Only a map with non-string keys fails to serialize, and the metadata has none.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The order a pin's platforms are kept in when not all fit: linux/amd64 first (the preferred
/// platform, whose run image is watched), then the others by name.
fn keep_order<'a>(keys: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut keys: Vec<String> = keys.cloned().collect();
    keys.sort_by_key(|k| (k != "linux/amd64", k.clone()));
    keys.dedup();
    keys
}

/// Starts what a piece cut for the budget becomes, so later fits know it was cut (not unreadable).
const CUT: &str = "bytes of JSON, over what is left of the";
/// Starts the one note naming every piece cut.
const CUT_NOTE: &str = "not kept, over the ";
/// Pieces the note names before `and N more`.
const NAMED: usize = 16;

/// What is left of a pin's budget as its pieces are admitted in order.
struct Budget {
    total: usize,
    left: usize,
}

impl Budget {
    /// Whether a piece of `size` bytes (and its key) fits; it is charged when it does.
    fn admit(&mut self, key: &str, size: usize) -> bool {
        let cost = size + key.len() + 8;
        let fits = cost <= self.left;
        if fits {
            self.left -= cost;
        }
        fits
    }

    fn why(&self, size: usize) -> String {
        format!("it takes {size} {CUT} {} a pin keeps", self.total)
    }

    fn platform(&mut self, key: &str, metadata: PlatformMetadata) -> PlatformMetadata {
        let size = json_size(&metadata);
        if self.admit(key, size) {
            return metadata;
        }
        let note = PlatformMetadata::Unreadable { error: MetadataError::OverLimit(self.why(size)).to_string() };
        self.admit(key, json_size(&note));
        note
    }

    fn packages(&mut self, key: &str, packages: Packages) -> Packages {
        let size = json_size(&packages);
        if self.admit(key, size) {
            return packages;
        }
        let note = Packages::unreadable(format!("the package list was not kept: {}", self.why(size)));
        self.admit(key, json_size(&note));
        note
    }
}

fn platform_cut(metadata: &PlatformMetadata) -> bool {
    matches!(metadata, PlatformMetadata::Unreadable { error } if error.contains(CUT))
}

fn packages_cut(packages: &Packages) -> bool {
    matches!(packages, Packages::Unreadable { note } if note.contains(CUT))
}

/// `a, b, c` of at most [`NAMED`] names, then `and N more`.
fn named<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    let mut out = names.iter().take(NAMED).copied().collect::<Vec<_>>().join(", ");
    if names.len() > NAMED {
        out.push_str(&format!(" and {} more", names.len() - NAMED));
    }
    out
}

impl PinnedMetadata {
    /// Adds a note for each package list (of the image, and of its run image) cut at its cap,
    /// naming `image` (the pinned reference) and the platforms, unless the pin has it already.
    pub fn note_cut_lists(&mut self, image: &str) {
        let mut sides: Vec<(String, &BTreeMap<String, Packages>)> = vec![(image.to_string(), &self.packages)];
        if let Some(run) = &self.run_image {
            sides.push((run.reference.clone().unwrap_or_else(|| run.image.clone()), &run.packages));
        }
        let mut notes = Vec::new();
        for (name, lists) in sides {
            let mut cuts: BTreeMap<usize, Vec<&String>> = BTreeMap::new();
            for (platform, list) in lists {
                if let Some(cut_at) = list.cut_at() {
                    cuts.entry(cut_at).or_default().push(platform);
                }
            }
            for (cut_at, platforms) in cuts {
                let whose = match lists.len() {
                    1 => name.clone(),
                    _ => format!("{name} ({})", named(platforms.into_iter())),
                };
                notes.push(crate::packages::cut_note(&whose, cut_at));
            }
        }
        for note in notes {
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
    }

    /// Keeps what fits in `total` bytes of JSON and turns the rest into notes: the platforms in
    /// [`keep_order`], each one's CNB metadata then its package list, then the run image's lists.
    /// A platform whose metadata is cut classifies as `unknown` with the reason, a cut package
    /// list gives a `packages_note`, and one of `notes` names every piece cut. Metadata that
    /// already fits comes out as it went in, so fitting again (after adding the run image, or
    /// another platform) only cuts what was added.
    pub fn fit(&mut self, total: usize) {
        self.notes.retain(|n| !n.starts_with(CUT_NOTE));
        let mut budget = Budget { total, left: total.saturating_sub(FRAME_BYTES) };
        for note in &self.notes {
            budget.left = budget.left.saturating_sub(note.len() + 4);
        }
        let (mut platforms, mut packages) = (std::mem::take(&mut self.platforms), std::mem::take(&mut self.packages));
        for key in keep_order(platforms.keys().chain(packages.keys())) {
            if let Some(metadata) = platforms.remove(&key) {
                self.platforms.insert(key.clone(), budget.platform(&key, metadata));
            }
            if let Some(list) = packages.remove(&key) {
                self.packages.insert(key.clone(), budget.packages(&key, list));
            }
        }
        let mut run_image_cut = false;
        if let Some(run) = &mut self.run_image {
            if budget.admit("run_image", run.image.len() + run.reference.as_ref().map_or(0, String::len)) {
                let mut lists = std::mem::take(&mut run.packages);
                for key in keep_order(lists.keys()) {
                    if let Some(list) = lists.remove(&key) {
                        run.packages.insert(key.clone(), budget.packages(&key, list));
                    }
                }
            } else {
                self.run_image = None;
                run_image_cut = true;
            }
        }
        let mut cut = Vec::new();
        let metadata: Vec<&String> = self.platforms.iter().filter(|(_, m)| platform_cut(m)).map(|(k, _)| k).collect();
        let lists: Vec<&String> = self.packages.iter().filter(|(_, p)| packages_cut(p)).map(|(k, _)| k).collect();
        let run_lists: Vec<&String> =
            self.run_image.iter().flat_map(|r| &r.packages).filter(|(_, p)| packages_cut(p)).map(|(k, _)| k).collect();
        for (what, keys) in [
            ("the CNB metadata of", metadata),
            ("the OS package lists of", lists),
            ("the run image's OS package lists of", run_lists),
        ] {
            if !keys.is_empty() {
                cut.push(format!("{what} {}", named(keys.into_iter())));
            }
        }
        if run_image_cut {
            cut.push("the run image pin".into());
        }
        if !cut.is_empty() {
            self.notes.push(format!("{CUT_NOTE}{total} bytes of JSON a pin keeps: {}", cut.join("; ")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cnb::{BuilderMetadata, Buildpack, RunImagePin};
    use crate::packages::{Package, Source};

    fn builder(buildpacks: usize) -> PlatformMetadata {
        let buildpack = |i: usize| Buildpack {
            id: format!("example/buildpack-{i:05}"),
            version: Some("1.0.0".into()),
            homepage: Some(format!("https://example.com/buildpacks/{i}")),
        };
        let metadata = BuilderMetadata { buildpacks: (0..buildpacks).map(buildpack).collect(), ..Default::default() };
        PlatformMetadata::Builder(Box::new(metadata))
    }

    fn list(n: usize) -> Packages {
        let package = |i: usize| Package {
            name: format!("lib{i:05}"),
            arch: Some("amd64".into()),
            version: "1.0-1ubuntu0.22.04.1".into(),
        };
        Packages::Listed { source: Source::PaketoLabel, packages: (0..n).map(package).collect(), cut_at: None }
    }

    fn pin(platforms: &[&str], buildpacks: usize, packages: usize) -> PinnedMetadata {
        PinnedMetadata {
            platforms: platforms.iter().map(|p| (p.to_string(), builder(buildpacks))).collect(),
            run_image: None,
            packages: platforms.iter().map(|p| (p.to_string(), list(packages))).collect(),
            releases: Default::default(),
            notes: vec!["index lists 3 entries; read the first 2 distinct platforms, 1 ignored (1 duplicate)".into()],
        }
    }

    #[test]
    fn a_pin_notes_each_cut_list_once_naming_the_image_and_platforms() {
        let cut = |n: usize| match list(n) {
            Packages::Listed { source, packages, .. } => Packages::Listed { source, packages, cut_at: Some(5_000) },
            other => other,
        };
        let mut metadata = pin(&["linux/amd64", "linux/arm64"], 1, 10);
        metadata.packages.insert("linux/arm64".into(), cut(10));
        metadata.run_image = Some(RunImagePin {
            image: "r.example.com/run:latest".into(),
            reference: Some("r.example.com/run@sha256:02".into()),
            packages: [("linux/amd64".to_string(), cut(3))].into(),
        });
        metadata.note_cut_lists("r.example.com/builder@sha256:01");
        metadata.note_cut_lists("r.example.com/builder@sha256:01");
        let tail = "was cut at 5000 entries (the most read of a list): packages beyond them are not compared";
        assert_eq!(
            metadata.notes[1..],
            [
                format!("the package list of r.example.com/builder@sha256:01 (linux/arm64) {tail}"),
                format!("the package list of r.example.com/run@sha256:02 {tail}"),
            ]
        );
        // Fitting keeps them, as it keeps every note it did not write.
        metadata.fit(MAX_PINNED_BYTES);
        assert_eq!(metadata.notes.len(), 3, "{:?}", metadata.notes);
    }

    #[test]
    fn a_real_builder_is_kept_whole() {
        // Two platforms, 150 buildpacks and a full build image's 1,000 packages each, and the run
        // image's 500 packages per platform.
        let mut metadata = pin(&["linux/amd64", "linux/arm64"], 150, 1_000);
        metadata.run_image = Some(RunImagePin {
            image: "index.docker.io/paketobuildpacks/run-jammy-base:latest".into(),
            reference: Some("index.docker.io/paketobuildpacks/run-jammy-base@sha256:0123".into()),
            packages: [("linux/amd64".to_string(), list(500)), ("linux/arm64".to_string(), list(500))].into(),
        });
        let before = metadata.clone();
        metadata.fit(MAX_PINNED_BYTES);
        assert_eq!(metadata, before);
        assert!(json_size(&metadata) < 300 << 10, "{}", json_size(&metadata));
    }

    #[test]
    fn an_oversized_pin_keeps_amd64_first_cuts_the_rest_with_notes_and_fits() {
        let platforms = ["linux/386", "linux/amd64", "linux/arm/v7", "linux/arm64", "linux/ppc64le", "linux/s390x"];
        let mut metadata = pin(&platforms, 1_500, 2_000);
        assert!(json_size(&metadata) > 2 * MAX_PINNED_BYTES);
        metadata.fit(MAX_PINNED_BYTES);
        let size = json_size(&metadata);
        assert!(size <= MAX_PINNED_BYTES, "{size}");
        assert!(
            matches!(metadata.platforms["linux/amd64"], PlatformMetadata::Builder(_)),
            "the preferred platform first"
        );
        assert!(matches!(metadata.packages["linux/amd64"], Packages::Listed { .. }));
        let PlatformMetadata::Unreadable { error } = &metadata.platforms["linux/s390x"] else { panic!("kept") };
        assert!(error.starts_with("metadata over the size limits, not kept: it takes "), "{error}");
        let Packages::Unreadable { note } = &metadata.packages["linux/s390x"] else { panic!("kept") };
        assert!(note.starts_with("the package list was not kept: it takes "), "{note}");
        assert_eq!(metadata.notes.len(), 2);
        assert!(metadata.notes[0].starts_with("index lists 3 entries"), "earlier notes stay first");
        let cut = &metadata.notes[1];
        assert!(cut.starts_with("not kept, over the 524288 bytes of JSON a pin keeps: the CNB metadata of "), "{cut}");
        assert!(cut.contains("linux/s390x") && !cut.contains("linux/amd64,"), "{cut}");
        // Fitting again changes nothing; a run image added later is cut from what is left.
        let fitted = metadata.clone();
        metadata.fit(MAX_PINNED_BYTES);
        assert_eq!(metadata, fitted);
        metadata.run_image = Some(RunImagePin {
            image: "registry.example.com/run:latest".into(),
            reference: None,
            packages: platforms.iter().map(|p| (p.to_string(), list(5_000))).collect(),
        });
        metadata.fit(MAX_PINNED_BYTES);
        assert!(json_size(&metadata) <= MAX_PINNED_BYTES);
        assert_eq!(metadata.platforms, fitted.platforms);
        let run = metadata.run_image.as_ref().unwrap();
        assert!(run.packages.values().all(|p| matches!(p, Packages::Unreadable { .. })));
        assert_eq!(metadata.notes.len(), 2, "one note names every cut");
        let cut = &metadata.notes[1];
        assert!(cut.ends_with("; the run image's OS package lists of linux/386, linux/amd64, linux/arm/v7, linux/arm64, linux/ppc64le, linux/s390x"), "{cut}");
    }
}

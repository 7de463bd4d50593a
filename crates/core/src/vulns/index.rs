//! The [`Index`]: the records that apply to the watched releases, kept lean (a mirror of 200,000
//! records must fit in a few tens of MiB) and indexed by binary package name, and the question it
//! answers: which records a move from one package list to another fixes.
//!
//! Layout: every string (binary name, fixed version, CVE id, record id) is interned once in one
//! byte arena and named by its offset (`u32`), a record's file stored there too; a record is 24
//! bytes (id, its CVEs' place in one flat list, priority, file, `modified`); its binaries of one
//! release sharing one fixed version form a group of 12 bytes (record, release, fixed version); a
//! binary name maps to its groups (4 bytes each). Summaries, source names and everything else of
//! a record are dropped on insert.
//!
//! One record per id: of two with one id (two files, or one mirror's stale copy), the one with the
//! newest `modified` is used and the others are kept only to be named ([`Fix::ignored`]).
//!
//! The daemon's index also keeps only the binaries whose names some watched image carries
//! ([`Index::with_names`]): a move is judged on the names of its two images' lists alone, so a
//! record none of whose binaries either image has can never be fixed by it, and a binary no image
//! has never blocks a fix. A record dropped so is only counted, and its id remembered as a 64-bit
//! hash: when a kept record has a dropped copy, the mirror is read again keeping those ids whole
//! ([`Index::ids_read_again`]), so which copy is used does not depend on the names.

use std::cmp::Ordering;
use std::collections::hash_map::{Entry, RandomState};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::BuildHasher;

use super::version::{compare, is_valid};
use super::{DataSource, Fix, FixedPackage, Priority, Record, RecordCopy, Release};
use crate::packages::Package;

/// A string in the arena: the offset of its length prefix.
type Sym = u32;
/// The fixed version of a binary the record names without one (or of an entry with no `fixed`
/// event, or with a version dpkg refuses): it is never fixed.
const UNFIXED: Sym = u32::MAX;

/// The records that apply to some releases, indexed by binary package name. Only what the given
/// releases need is kept: a record's entries of other ecosystems are dropped on insert.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// Releases kept (`None`: every `Ubuntu:*` release but `Pro`'s).
    releases: Option<Vec<Release>>,
    /// The kept ecosystems met so far, numbered by their place here.
    seen: Vec<Release>,
    strings: Strings,
    /// Binary name → its groups.
    by_binary: HashMap<Sym, Vec<u32>>,
    groups: Vec<Group>,
    records: Vec<Rec>,
    /// The CVE ids of all records, each record's a run of this list.
    cves: Vec<Sym>,
    /// The record in use for each id, while inserting (dropped by [`Index::seal`]).
    by_id: HashMap<Sym, u32>,
    /// The copies not used of a record in use: record → the superseded records of its id.
    copies: HashMap<u32, Vec<u32>>,
    /// Where the data came from, set by whoever loaded it.
    source: Option<DataSource>,
    /// Only counting ([`Index::counting`]): a record that would be kept is counted, not held.
    count_only: bool,
    /// Records of the kept releases read (held, only counted, or dropped for their names).
    applying: usize,
    /// Binary names kept ([`Index::with_names`]); `None`: every name.
    names: Option<HashSet<String>>,
    /// Ids kept whole whatever their names ([`Index::ids_read_again`]).
    whole_ids: HashSet<String>,
    /// The hashes of the ids of the records dropped for their names (a kept copy of one is found
    /// when done reading).
    dropped: Vec<u64>,
    /// Set by [`Index::seal`]: [`Index::ids_read_again`].
    read_again: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
struct Rec {
    id: Sym,
    cves_start: u32,
    cves_len: u16,
    /// The record's own priority, never another record's.
    priority: Option<Priority>,
    /// Another record of its id is newer: this one is never used.
    superseded: bool,
    /// The file it was read from ([`UNFIXED`]: none given).
    file: Sym,
    /// Its `modified`, in seconds ([`i64::MIN`]: none).
    modified: i64,
}

/// Binaries of one record and release with one fixed version.
#[derive(Debug, Clone, Copy)]
struct Group {
    record: u32,
    fixed: Sym,
    release: u16,
}

/// What one move did to one record's binaries.
#[derive(Default)]
struct Verdict<'a> {
    /// A binary was below its fixed version before and is at or above it after.
    lifted: bool,
    /// A binary the new image has is below its fixed version, or has none.
    blocked: bool,
    /// The record's binaries whose version changed: name → (from, to).
    moved: BTreeMap<&'a str, (&'a str, &'a str)>,
}

impl Index {
    /// An empty index keeping only `releases`' entries (every release but `Pro`'s when empty).
    pub fn new(releases: Vec<Release>) -> Self {
        if releases.is_empty() { Index::default() } else { Index::only(releases) }
    }

    /// An empty index keeping exactly `releases`' entries: none at all when there are none.
    pub fn only(releases: impl IntoIterator<Item = Release>) -> Self {
        let mut releases: Vec<Release> = releases.into_iter().collect();
        releases.sort();
        releases.dedup();
        Index { releases: Some(releases), ..Index::default() }
    }

    /// An index that holds nothing and only counts the records [`Index::new`] of `releases` would
    /// keep ([`Index::len`]): what `check` says of a mirror, at the cost of one record at a time
    /// whatever the mirror's size (holding every release's records of a big mirror costs hundreds
    /// of MiB). It finds no fixes.
    pub fn counting(releases: Vec<Release>) -> Self {
        Index { count_only: true, ..Index::new(releases) }
    }

    /// The same index keeping only the binaries named in `names` (the names the watched images'
    /// package lists carry): a record none of whose binaries is one of them is counted, not held.
    /// A move's fixes are the same as with every name kept as long as both its images' names are
    /// among them ([`Index::covers`]).
    pub fn with_names(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.names = Some(names.into_iter().collect());
        self
    }

    /// The same index keeping the records of `ids` whatever their binaries' names (the copies of
    /// a kept record, read again: [`Index::ids_read_again`]).
    pub fn with_whole_ids(mut self, ids: impl IntoIterator<Item = String>) -> Self {
        self.whole_ids = ids.into_iter().collect();
        self
    }

    /// Whether it keeps every binary named in `names` (always, without a name filter).
    pub fn covers<'a>(&self, mut names: impl Iterator<Item = &'a str>) -> bool {
        match &self.names {
            None => true,
            Some(kept) => names.all(|name| kept.contains(name)),
        }
    }

    /// The names it keeps, sorted (`None`: every name).
    pub fn names(&self) -> Option<BTreeSet<&str>> {
        self.names.as_ref().map(|names| names.iter().map(String::as_str).collect())
    }

    /// After [`Index::seal`] of an index with a name filter: the ids of the kept records that had
    /// a copy dropped for its names (found by 64-bit hash: a collision only costs a read). When
    /// there are any, the caller reads the source again into an empty index
    /// [`Index::with_whole_ids`] of them, so the copy used is the newest, as without a filter.
    pub fn ids_read_again(&self) -> &[String] {
        &self.read_again
    }

    /// The ids of the kept records that have a copy dropped for its names.
    fn copies_dropped(&self) -> Vec<String> {
        if self.dropped.is_empty() {
            return Vec::new();
        }
        let kept: HashMap<u64, &str> = self
            .records
            .iter()
            .map(|rec| self.strings.get(rec.id))
            .filter(|id| !self.whole_ids.contains(*id))
            .map(|id| (self.strings.hasher.hash_one(id), id))
            .collect();
        let mut ids: Vec<String> =
            self.dropped.iter().filter_map(|hash| kept.get(hash)).map(|id| id.to_string()).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The releases it keeps, sorted (`None`: every release but `Pro`'s).
    pub fn releases(&self) -> Option<&[Release]> {
        self.releases.as_deref()
    }

    /// Whether it keeps `release`'s entries (so a move of an image of `release` is matched in
    /// full against it).
    pub fn keeps(&self, release: &Release) -> bool {
        match &self.releases {
            None => release.0.starts_with("Ubuntu:") && !release.0.starts_with("Ubuntu:Pro:"),
            Some(kept) => kept.binary_search(release).is_ok(),
        }
    }

    /// Adds `record`'s entries of the kept releases; `false` when none applied (nothing kept).
    ///
    /// An entry applies when its ecosystem is one of the releases given to [`Index::new`] exactly
    /// (any `Ubuntu:*` when none were given), never `Ubuntu:Pro:*`. A record is kept only when
    /// some binary of an applying entry has a fixed version dpkg accepts: one that can never be
    /// fixed (no `fixed` event) is dropped whole. Binaries of an applying entry without a fixed
    /// version (or with one dpkg refuses) are kept as never fixed: an image that has one is not
    /// fixed by any move.
    pub fn insert(&mut self, record: Record) -> bool {
        self.insert_from(record, "")
    }

    /// [`Index::insert`] of a record read from `file` (named in its fixes; `""`: none). Of two
    /// records with one id, the newer `modified` is used (equal: the later file name; none: the
    /// oldest), the other only named.
    pub fn insert_from(&mut self, record: Record, file: &str) -> bool {
        // (release, fixed version or None, binary names), before anything is interned.
        let mut wanted: Vec<(u16, Option<&str>, BTreeSet<&str>)> = Vec::new();
        for entry in &record.affected {
            let Some(release) = self.release_number(&entry.ecosystem) else { continue };
            let entry_fixed = entry.fixed.as_deref().is_some_and(is_valid);
            for (name, version) in &entry.binaries {
                let fixed = (entry_fixed && is_valid(version)).then_some(version.as_str());
                match wanted.iter_mut().find(|(r, f, _)| *r == release && *f == fixed) {
                    Some((_, _, names)) => {
                        names.insert(name);
                    }
                    None => wanted.push((release, fixed, BTreeSet::from([name.as_str()]))),
                }
            }
        }
        if !wanted.iter().any(|(_, fixed, _)| fixed.is_some()) {
            return false;
        }
        self.applying += 1;
        if self.count_only {
            return true;
        }
        if let Some(names) = &self.names
            && !self.whole_ids.contains(&record.id)
        {
            for (_, _, binaries) in &mut wanted {
                binaries.retain(|name| names.contains(*name));
            }
            wanted.retain(|(_, _, binaries)| !binaries.is_empty());
            if wanted.is_empty() {
                self.dropped.push(self.strings.hasher.hash_one(record.id.as_str()));
                return true;
            }
        }
        let number = u32::try_from(self.records.len()).ok().filter(|n| *n < u32::MAX);
        // Interned: a CVE record's id is its one CVE, and a second copy of a record is found.
        let id = self.strings.intern(&record.id);
        let (Some(number), Some(id)) = (number, id) else { return false };
        let file = if file.is_empty() { None } else { self.strings.store(file) }.unwrap_or(UNFIXED);
        let modified = record.modified.map_or(i64::MIN, |at| at.timestamp());
        let superseded = self.supersede(id, number, (modified, file));
        let cves_start = u32::try_from(self.cves.len()).unwrap_or(u32::MAX);
        let mut cves_len: u16 = 0;
        for cve in &record.cves {
            if cves_len == u16::MAX || cves_start == u32::MAX {
                break;
            }
            let Some(cve) = self.strings.intern(cve) else { continue };
            self.cves.push(cve);
            cves_len += 1;
        }
        self.records.push(Rec { id, cves_start, cves_len, priority: record.priority, superseded, file, modified });
        for (release, fixed, names) in wanted {
            let fixed = match fixed {
                Some(version) => self.strings.intern(version).unwrap_or(UNFIXED),
                None => UNFIXED,
            };
            let Ok(group) = u32::try_from(self.groups.len()) else { break };
            self.groups.push(Group { record: number, fixed, release });
            for name in names {
                if let Some(name) = self.strings.intern(name) {
                    self.by_binary.entry(name).or_default().push(group);
                }
            }
        }
        true
    }

    /// Whether the record `number` about to be inserted with id `id`, `(modified, file)`, is
    /// superseded by a copy already in; when it supersedes one, that one is marked so and its
    /// copies become the new record's.
    fn supersede(&mut self, id: Sym, number: u32, (modified, file): (i64, Sym)) -> bool {
        let Some(&used) = self.by_id.get(&id) else {
            self.by_id.insert(id, number);
            return false;
        };
        let Some(old) = self.records.get(used as usize).copied() else { return false };
        let newer = match modified.cmp(&old.modified) {
            Ordering::Equal => self.file_name(file) > self.file_name(old.file),
            order => order == Ordering::Greater,
        };
        if !newer {
            self.copies.entry(used).or_default().push(number);
            return true;
        }
        if let Some(rec) = self.records.get_mut(used as usize) {
            rec.superseded = true;
        }
        let mut older = self.copies.remove(&used).unwrap_or_default();
        older.push(used);
        self.copies.insert(number, older);
        self.by_id.insert(id, number);
        false
    }

    fn file_name(&self, file: Sym) -> &str {
        if file == UNFIXED { "" } else { self.strings.get(file) }
    }

    /// Where the data came from (as the loader said: [`Index::set_source`]).
    pub fn source(&self) -> Option<&DataSource> {
        self.source.as_ref()
    }

    pub fn set_source(&mut self, source: DataSource) {
        self.source = Some(source);
    }

    /// Done inserting: what only inserting needs is let go (the lookup table keeps the binary
    /// names alone, versions and CVE ids are never looked up by text) and every list is cut to its
    /// length. A record inserted later is still kept, but a copy of an earlier one is no longer
    /// found (both would be used).
    pub fn seal(&mut self) {
        self.by_id = HashMap::new();
        self.read_again = self.copies_dropped();
        self.dropped = Vec::new();
        let names: Vec<Sym> = self.by_binary.keys().copied().collect();
        self.strings.keep_only(&names);
        self.by_binary.shrink_to_fit();
        for groups in self.by_binary.values_mut() {
            groups.shrink_to_fit();
        }
        self.groups.shrink_to_fit();
        self.records.shrink_to_fit();
        self.cves.shrink_to_fit();
        self.strings.bytes.shrink_to_fit();
    }

    /// Records of the kept releases read (held, or only counted: those of a counting index, and
    /// those dropped for their binaries' names).
    pub fn len(&self) -> usize {
        self.applying
    }

    /// Records held (every copy of an id counts).
    pub fn held(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// No record, group, binary or string held (a counting index's state).
    #[cfg(test)]
    pub(super) fn holds_nothing(&self) -> bool {
        self.records.is_empty() && self.groups.is_empty() && self.by_binary.is_empty() && self.strings.bytes.is_empty()
    }

    /// The records a move of `release` from `before` to `after` (one platform's binary packages)
    /// fixes, sorted by priority (highest first, unknown last) then id.
    ///
    /// A record is fixed by the move when some binary it lists for `release` was below its fixed
    /// version before and is at or above it after, and every binary it lists that the new image
    /// has is at or above its fixed version. A binary the move added counts only in the second
    /// test; one it removed only in neither (so a move that only drops a record's binaries is
    /// not said to fix it: its package diff says what went). A package listed several times (one
    /// per architecture) is judged by its lowest version. Versions dpkg refuses never prove a
    /// fix. `packages` are the record's binaries whose version changed, once per name. A record's
    /// priority is its own; one without (a USN) takes the highest of the records this move fixes
    /// that are among its CVEs, else unknown: a record the move does not fix never lends its
    /// priority. Of the copies of one id, only the one in use counts.
    pub fn fixes(&self, release: &Release, before: &[Package], after: &[Package]) -> Vec<Fix> {
        let Some(release) = self.seen.iter().position(|seen| seen == release) else { return Vec::new() };
        let (before, after) = (lowest(before), lowest(after));
        let mut verdicts: HashMap<u32, Verdict> = HashMap::new();
        let names: BTreeSet<&str> = before.keys().chain(after.keys()).copied().collect();
        for name in names {
            let Some(groups) = self.strings.find(name).and_then(|sym| self.by_binary.get(&sym)) else { continue };
            let (from, to) = (before.get(name).copied(), after.get(name).copied());
            for group in groups.iter().filter_map(|g| self.groups.get(*g as usize)) {
                let superseded = self.records.get(group.record as usize).is_none_or(|rec| rec.superseded);
                if usize::from(group.release) != release || superseded {
                    continue;
                }
                let fixed = (group.fixed != UNFIXED).then(|| self.strings.get(group.fixed));
                let below =
                    |version: &str| is_valid(version) && fixed.is_some_and(|f| compare(version, f) == Ordering::Less);
                let at_or_above =
                    |version: &str| is_valid(version) && fixed.is_some_and(|f| compare(version, f) != Ordering::Less);
                let verdict = verdicts.entry(group.record).or_default();
                if let Some(to) = to {
                    if !at_or_above(to) {
                        verdict.blocked = true;
                    } else if from.is_some_and(below) {
                        verdict.lifted = true;
                    }
                }
                if let (Some(from), Some(to)) = (from, to)
                    && from != to
                {
                    verdict.moved.insert(name, (from, to));
                }
            }
        }
        let mut fixes: Vec<Fix> = verdicts
            .into_iter()
            .filter(|(_, verdict)| verdict.lifted && !verdict.blocked)
            .filter_map(|(record, verdict)| self.fix(record, verdict))
            .collect();
        lend_priorities(&mut fixes);
        fixes.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.id.cmp(&b.id)));
        fixes.dedup_by(|later, first| later.id == first.id);
        fixes
    }

    /// The [`Fix`] a record's verdict reports.
    fn fix(&self, record: u32, verdict: Verdict) -> Option<Fix> {
        let rec = self.records.get(record as usize)?;
        let start = rec.cves_start as usize;
        let cves = self.cves.get(start..start + usize::from(rec.cves_len)).unwrap_or_default();
        let copies = self.copies.get(&record).map(Vec::as_slice).unwrap_or_default();
        let ignored = copies
            .iter()
            .filter_map(|copy| self.records.get(*copy as usize))
            .map(|copy| RecordCopy { file: self.file_name(copy.file).to_string(), modified: shown_time(copy.modified) })
            .collect();
        Some(Fix {
            id: self.strings.get(rec.id).to_string(),
            cves: cves.iter().map(|cve| self.strings.get(*cve).to_string()).collect(),
            priority: rec.priority,
            packages: verdict
                .moved
                .into_iter()
                .map(|(name, (from, to))| FixedPackage { name: name.into(), from: from.into(), to: to.into() })
                .collect(),
            priority_from: Vec::new(),
            file: (rec.file != UNFIXED).then(|| self.strings.get(rec.file).to_string()),
            modified: shown_time(rec.modified),
            ignored,
        })
    }

    /// The number of a kept ecosystem, numbering it when first met; `None` when it is not kept.
    fn release_number(&mut self, ecosystem: &str) -> Option<u16> {
        if ecosystem.starts_with("Ubuntu:Pro:") {
            return None;
        }
        let kept = match &self.releases {
            None => ecosystem.starts_with("Ubuntu:"),
            Some(kept) => kept.iter().any(|release| release.0 == ecosystem),
        };
        if !kept {
            return None;
        }
        if let Some(number) = self.seen.iter().position(|seen| seen.0 == ecosystem) {
            return u16::try_from(number).ok();
        }
        let number = u16::try_from(self.seen.len()).ok()?;
        self.seen.push(Release(ecosystem.to_string()));
        Some(number)
    }
}

/// A priority for each fix without its own (a USN): the highest of the other fixes of the same
/// move that give one and name one of its CVEs, recorded in `priority_from`. Only fixes of this
/// move lend: a record the move does not fix never raises another.
fn lend_priorities(fixes: &mut [Fix]) {
    let mut by_cve: HashMap<&str, (Priority, Vec<&str>)> = HashMap::new();
    for fix in fixes.iter() {
        let Some(priority) = fix.priority else { continue };
        for cve in &fix.cves {
            let known = by_cve.entry(cve).or_insert((priority, Vec::new()));
            if priority > known.0 {
                *known = (priority, Vec::new());
            }
            if priority == known.0 {
                known.1.push(&fix.id);
            }
        }
    }
    let lent: Vec<Option<(Priority, Vec<String>)>> = fixes
        .iter()
        .map(|fix| {
            if fix.priority.is_some() {
                return None;
            }
            let best = fix.cves.iter().filter_map(|cve| by_cve.get(cve.as_str())).map(|(p, _)| *p).max()?;
            let mut from: Vec<String> = fix
                .cves
                .iter()
                .filter_map(|cve| by_cve.get(cve.as_str()))
                .filter(|(p, _)| *p == best)
                .flat_map(|(_, ids)| ids.iter().map(|id| id.to_string()))
                .collect();
            from.sort();
            from.dedup();
            Some((best, from))
        })
        .collect();
    for (fix, lent) in fixes.iter_mut().zip(lent) {
        if let Some((priority, from)) = lent {
            (fix.priority, fix.priority_from) = (Some(priority), from);
        }
    }
}

/// A `modified` in seconds as RFC 3339 (`None` for none).
fn shown_time(seconds: i64) -> Option<String> {
    if seconds == i64::MIN {
        return None;
    }
    chrono::DateTime::from_timestamp(seconds, 0).map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// Each package name of a list with its lowest version (Debian's order).
fn lowest(packages: &[Package]) -> BTreeMap<&str, &str> {
    let mut out: BTreeMap<&str, &str> = BTreeMap::new();
    for package in packages {
        out.entry(&package.name)
            .and_modify(|kept| {
                if compare(&package.version, kept) == Ordering::Less {
                    *kept = &package.version;
                }
            })
            .or_insert(&package.version);
    }
    out
}

/// Interned strings: one byte arena of length-prefixed (`u16`) strings, found again through a
/// table from a keyed hash to the offset (a record id is stored without an entry there). Hash collisions probe the next key, so two strings never
/// share a [`Sym`]; the key is random per index, so a crafted mirror cannot make them common.
#[derive(Debug, Clone, Default)]
struct Strings {
    bytes: Vec<u8>,
    /// Keyed by 32 bits of the hash (half the table of a 64-bit key; the rarer collisions probe).
    table: HashMap<u32, Sym>,
    hasher: RandomState,
}

impl Strings {
    /// The symbol of `text`, added when new; `None` when it is longer than 65,535 bytes or the
    /// arena is full (4 GiB).
    fn intern(&mut self, text: &str) -> Option<Sym> {
        let len = u16::try_from(text.len()).ok()?;
        let mut key = self.hasher.hash_one(text) as u32;
        loop {
            match self.table.entry(key) {
                Entry::Occupied(found) if read(&self.bytes, *found.get()) == text => return Some(*found.get()),
                Entry::Occupied(_) => key = key.wrapping_add(1),
                Entry::Vacant(slot) => {
                    let at = u32::try_from(self.bytes.len())
                        .ok()
                        .filter(|at| usize::try_from(*at).is_ok_and(|at| at + 2 + text.len() < UNFIXED as usize))?;
                    self.bytes.extend_from_slice(&len.to_le_bytes());
                    self.bytes.extend_from_slice(text.as_bytes());
                    slot.insert(at);
                    return Some(at);
                }
            }
        }
    }

    /// Stores `text` without interning it (a record's id: never looked up, never shared).
    fn store(&mut self, text: &str) -> Option<Sym> {
        push(&mut self.bytes, u16::try_from(text.len()).ok()?, text)
    }

    /// Forgets the lookup of every string but `syms` (their text stays in the arena).
    fn keep_only(&mut self, syms: &[Sym]) {
        let mut table = HashMap::with_capacity(syms.len());
        for &sym in syms {
            let mut key = self.hasher.hash_one(read(&self.bytes, sym)) as u32;
            while let Entry::Occupied(_) = table.entry(key) {
                key = key.wrapping_add(1);
            }
            table.insert(key, sym);
        }
        self.table = table;
    }

    /// The symbol of `text` when interned.
    fn find(&self, text: &str) -> Option<Sym> {
        let mut key = self.hasher.hash_one(text) as u32;
        loop {
            let at = *self.table.get(&key)?;
            if read(&self.bytes, at) == text {
                return Some(at);
            }
            key = key.wrapping_add(1);
        }
    }

    fn get(&self, sym: Sym) -> &str {
        read(&self.bytes, sym)
    }
}

/// Appends a length-prefixed string to an arena; `None` when it would pass 4 GiB.
fn push(bytes: &mut Vec<u8>, len: u16, text: &str) -> Option<Sym> {
    let at = u32::try_from(bytes.len()).ok().filter(|at| (*at as usize) + 2 + text.len() < UNFIXED as usize)?;
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(text.as_bytes());
    Some(at)
}

/// The string at `sym` in an arena (empty for a symbol not from it).
fn read(bytes: &[u8], sym: Sym) -> &str {
    let at = sym as usize;
    let Some(&[low, high]) = bytes.get(at..at + 2) else { return "" };
    let len = usize::from(u16::from_le_bytes([low, high]));
    bytes.get(at + 2..at + 2 + len).and_then(|text| std::str::from_utf8(text).ok()).unwrap_or("")
}

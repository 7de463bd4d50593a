//! Reading OSV records from a directory tree, a `.tar.gz` or a `.zip`, within bounds: each record file at
//! most [`MAX_RECORD`] bytes, at most [`MAX_ENTRIES`] entries and [`MAX_ARCHIVE`] decompressed
//! bytes in all. A file that cannot be a record is skipped and counted by reason; a source over
//! the whole caps is refused (its data would be partial).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use builder_monitor_core::vulns::{Index, parse_record};
use sha2::{Digest, Sha256};

/// The largest record file read (Ubuntu's largest are tens of KiB).
pub const MAX_RECORD: u64 = 1024 * 1024;
/// Files (or archive entries) looked at, at most.
pub const MAX_ENTRIES: u64 = 1_000_000;
/// The largest central directory of a `.zip` walked (one entry at a time, never held): 256 bytes
/// an entry for the entry cap's worth of records, room for their paths and extra fields (Ubuntu's
/// take ~75).
pub const MAX_ZIP_DIRECTORY: u64 = 256 * 1024 * 1024;
/// Bytes an archive may decompress to, at most.
pub const MAX_ARCHIVE: u64 = 2 * 1024 * 1024 * 1024;
/// Directory levels walked, at most (Ubuntu's tree is three deep).
const MAX_DEPTH: usize = 32;

/// Why a file was not read as a record (the `reason` label of `builder_monitor_osv_skipped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    TooLarge,
    NotJson,
    Refused,
    Symlink,
    PathTraversal,
    Unreadable,
}

impl Skip {
    pub fn as_str(self) -> &'static str {
        match self {
            Skip::TooLarge => "too_large",
            Skip::NotJson => "not_json",
            Skip::Refused => "refused",
            Skip::Symlink => "symlink",
            Skip::PathTraversal => "path_traversal",
            Skip::Unreadable => "unreadable",
        }
    }

    fn why(self) -> &'static str {
        match self {
            Skip::TooLarge => "over 1 MiB",
            Skip::NotJson => "not JSON",
            Skip::Refused => "not an OSV record",
            Skip::Symlink => "a symbolic link out of the mirror (or to a directory), not followed",
            Skip::PathTraversal => "an archive path leaving the mirror (`..` or absolute)",
            Skip::Unreadable => "cannot be read",
        }
    }
}

/// Why a whole source was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read the OSV mirror {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    #[error("the OSV mirror {} has over {MAX_ENTRIES} entries: refused (is it the right directory or archive?)", path.display())]
    TooManyEntries { path: PathBuf },
    #[error("the OSV archive {} has a central directory of {} MiB, over {} MiB: refused (is it the right archive?)", path.display(), size >> 20, MAX_ZIP_DIRECTORY >> 20)]
    ZipDirectoryTooLarge { path: PathBuf, size: u64 },
    #[error("the OSV archive {} decompresses past {} GiB: refused", path.display(), MAX_ARCHIVE >> 30)]
    TooLarge { path: PathBuf },
    #[error("the OSV archive {} is not a readable .tar.gz: {error}", path.display())]
    Corrupt { path: PathBuf, error: std::io::Error },
    #[error("the OSV archive {} is not a readable .zip: {error}", path.display())]
    CorruptZip { path: PathBuf, error: std::io::Error },
    #[error("the OSV archive {} is neither a .tar.gz nor a .zip (it starts with neither's magic bytes)", path.display())]
    UnknownArchive { path: PathBuf },
}

/// What a load read: the index, and what it skipped, by reason (count, first file).
#[derive(Debug)]
pub struct Loaded {
    pub index: Index,
    /// Records read (kept or not: a record of no watched release is read, not kept).
    pub read: u64,
    pub skipped: BTreeMap<Skip, (u64, String)>,
    /// A directory's digest: each record file's name and bytes, in the order read (an archive's
    /// is its file's: [`file_sha256`]).
    pub sha256: Option<String>,
    hasher: Option<Sha256>,
}

impl Loaded {
    fn new(index: Index) -> Self {
        Loaded { index, read: 0, skipped: BTreeMap::new(), sha256: None, hasher: None }
    }

    /// Nothing read: `index` as it is.
    pub fn empty(index: Index) -> Self {
        Loaded::new(index)
    }

    fn skip(&mut self, why: Skip, name: &str) {
        self.skipped.entry(why).or_insert_with(|| (0, name.to_string())).0 += 1;
    }

    /// One record file's bytes: into the index, or skipped.
    fn record(&mut self, bytes: &[u8], name: &str) {
        if let Some(hasher) = &mut self.hasher {
            hasher.update(name.as_bytes());
            hasher.update([0]);
            hasher.update(bytes);
            hasher.update([0]);
        }
        match parse_record(bytes) {
            Ok(record) => {
                self.read += 1;
                self.index.insert_from(record, name);
            }
            Err(_) if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err() => self.skip(Skip::NotJson, name),
            Err(_) => self.skip(Skip::Refused, name),
        }
    }

    /// Done reading: the index sealed and the parse's freed heap given back (a mirror's records are
    /// parsed one at a time, each leaving fragments glibc would keep).
    fn finished(mut self) -> Self {
        self.sha256 = self.hasher.take().map(|hasher| hex::encode(hasher.finalize()));
        self.index.seal();
        crate::memory::trim_heap();
        self
    }

    /// One line per reason, not one per file.
    pub fn log_skips(&self, source: &str) {
        for (why, (count, first)) in &self.skipped {
            tracing::warn!(source, reason = why.as_str(), count, first = %first, "OSV files skipped: {}", why.why());
        }
    }
}

/// Reads a source with `read` into `index`; when the index keeps only some binary names and a
/// kept record had a copy dropped for its names, reads it once more into an empty copy of `index`
/// that keeps those ids whole, so the copy used is the one without the filter ([`Index::ids_read_again`]).
fn read_whole_copies(index: Index, read: impl Fn(Index) -> Result<Loaded, LoadError>) -> Result<Loaded, LoadError> {
    let empty = index.clone();
    let loaded = read(index)?;
    let again = loaded.index.ids_read_again().to_vec();
    if again.is_empty() {
        return Ok(loaded);
    }
    tracing::debug!(ids = again.len(), "records with copies dropped for their names: reading the mirror again");
    drop(loaded);
    read(empty.with_whole_ids(again))
}

/// Every `*.json` under `root`, recursively.
pub fn directory(root: &Path, index: Index) -> Result<Loaded, LoadError> {
    read_whole_copies(index, |index| directory_once(root, index))
}

fn directory_once(root: &Path, index: Index) -> Result<Loaded, LoadError> {
    let read_err = |path: &Path, error| LoadError::Read { path: path.to_path_buf(), error };
    let canonical = root.canonicalize().map_err(|e| read_err(root, e))?;
    let mut loaded = Loaded::new(index);
    loaded.hasher = Some(Sha256::new());
    let mut buf = Vec::new();
    let mut entries = 0u64;
    let mut stack = vec![(canonical.clone(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let listing = std::fs::read_dir(&dir).map_err(|e| read_err(&dir, e))?;
        for entry in listing {
            let entry = entry.map_err(|e| read_err(&dir, e))?;
            entries += 1;
            if entries > MAX_ENTRIES {
                return Err(LoadError::TooManyEntries { path: root.to_path_buf() });
            }
            let path = entry.path();
            let name = path.strip_prefix(&canonical).unwrap_or(&path).display().to_string();
            let Ok(kind) = entry.file_type() else {
                loaded.skip(Skip::Unreadable, &name);
                continue;
            };
            if kind.is_dir() {
                if depth < MAX_DEPTH {
                    stack.push((path, depth + 1));
                }
                continue;
            }
            if !name.ends_with(".json") {
                continue;
            }
            if kind.is_symlink() {
                // A link is followed only to a file inside the mirror.
                match path.canonicalize() {
                    Ok(target) if target.starts_with(&canonical) && target.is_file() => {}
                    _ => {
                        loaded.skip(Skip::Symlink, &name);
                        continue;
                    }
                }
            } else if !kind.is_file() {
                continue;
            }
            match read_bounded(std::fs::File::open(&path), &mut buf) {
                Ok(true) => loaded.record(&buf, &name),
                Ok(false) => loaded.skip(Skip::TooLarge, &name),
                Err(_) => loaded.skip(Skip::Unreadable, &name),
            }
        }
    }
    Ok(loaded.finished())
}

/// The SHA-256 of the file at `path`, as hex (an archive's digest, recorded with what it allowed).
pub fn file_sha256(path: &Path) -> Result<String, LoadError> {
    let read = |error| LoadError::Read { path: path.to_path_buf(), error };
    let mut file = std::fs::File::open(path).map_err(read)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf).map_err(read)? {
            0 => return Ok(hex::encode(hasher.finalize())),
            n => hasher.update(&buf[..n]),
        }
    }
}

/// Reads at most [`MAX_RECORD`] bytes into `buf`; false when there were more.
fn read_bounded(file: std::io::Result<impl Read>, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    buf.clear();
    file?.take(MAX_RECORD + 1).read_to_end(buf)?;
    Ok(buf.len() as u64 <= MAX_RECORD)
}

/// Counts the bytes read through it, refusing past [`MAX_ARCHIVE`].
struct Capped<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(out)?;
        self.read += n as u64;
        if self.read > MAX_ARCHIVE {
            return Err(std::io::Error::other(CAP_HIT));
        }
        Ok(n)
    }
}

const CAP_HIT: &str = "decompressed size cap";

/// Every `*.json` regular file of the archive at `path`: a `.tar.gz` or a `.zip`, told by its
/// first bytes (a download's name says nothing).
pub fn archive(path: &Path, index: Index) -> Result<Loaded, LoadError> {
    read_whole_copies(index, |index| archive_once(path, index))
}

fn archive_once(path: &Path, index: Index) -> Result<Loaded, LoadError> {
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(path).and_then(|mut f| f.read(&mut magic));
    match read.map_err(|error| LoadError::Read { path: path.to_path_buf(), error })? {
        n if n >= 2 && magic[..2] == [0x1f, 0x8b] => tar_gz(path, index),
        4 if magic == *b"PK\x03\x04" || magic == *b"PK\x05\x06" => zip_file(path, index),
        _ => Err(LoadError::UnknownArchive { path: path.to_path_buf() }),
    }
}

/// Every `*.json` regular file of the `.zip` at `path`, its central directory walked one entry
/// at a time ([`super::zip_walk`]). Its end record's entry count and directory size are checked
/// first ([`MAX_ENTRIES`], [`MAX_ZIP_DIRECTORY`]); the walk stops at that count and size. The
/// directory's sizes may lie (a zip bomb): every entry is read through [`MAX_RECORD`] and all of
/// them through [`MAX_ARCHIVE`].
pub fn zip_file(path: &Path, index: Index) -> Result<Loaded, LoadError> {
    let read = |error| LoadError::Read { path: path.to_path_buf(), error };
    let corrupt = |error| LoadError::CorruptZip { path: path.to_path_buf(), error };
    let mut file = std::fs::File::open(path).map_err(read)?;
    let Some(directory) = super::zip_end::directory(&mut file).map_err(read)? else {
        let none = std::io::Error::new(std::io::ErrorKind::InvalidData, "it has no end-of-central-directory record");
        return Err(corrupt(none));
    };
    if directory.entries > MAX_ENTRIES {
        return Err(LoadError::TooManyEntries { path: path.to_path_buf() });
    }
    if directory.size > MAX_ZIP_DIRECTORY {
        return Err(LoadError::ZipDirectoryTooLarge { path: path.to_path_buf(), size: directory.size });
    }
    let walked = std::fs::File::open(path).map_err(read)?;
    let mut walk = super::zip_walk::Walk::new(walked, directory).map_err(corrupt)?;
    let mut loaded = Loaded::new(index);
    let (mut buf, mut total) = (Vec::new(), 0u64);
    while let Some(entry) = walk.next_entry().map_err(corrupt)? {
        let name = String::from_utf8_lossy(&entry.name).into_owned();
        if !name.ends_with(".json") {
            continue;
        }
        if leaves_the_mirror(&name) {
            loaded.skip(Skip::PathTraversal, &name);
            continue;
        }
        if entry.unix_mode.is_some_and(|mode| mode & 0o170000 == 0o120000) {
            loaded.skip(Skip::Symlink, &name);
            continue;
        }
        if entry.uncompressed > MAX_RECORD {
            loaded.skip(Skip::TooLarge, &name);
            continue;
        }
        buf.clear();
        let data = super::zip_walk::open(&mut file, &entry);
        if data.and_then(|data| data.take(MAX_RECORD + 1).read_to_end(&mut buf)).is_err() {
            loaded.skip(Skip::Unreadable, &name);
            continue;
        }
        total += buf.len() as u64;
        if total > MAX_ARCHIVE {
            return Err(LoadError::TooLarge { path: path.to_path_buf() });
        }
        if buf.len() as u64 > MAX_RECORD {
            loaded.skip(Skip::TooLarge, &name);
        } else if !super::zip_walk::crc_matches(&entry, &buf) {
            loaded.skip(Skip::Unreadable, &name);
        } else {
            loaded.record(&buf, &name);
        }
    }
    Ok(loaded.finished())
}

/// Whether an archive's entry name leaves the mirror (`..`, or absolute).
fn leaves_the_mirror(name: &str) -> bool {
    Path::new(name).components().any(|c| matches!(c, Component::ParentDir | Component::RootDir | Component::Prefix(_)))
}

/// Every `*.json` regular file of the `.tar.gz` at `path`.
pub fn tar_gz(path: &Path, index: Index) -> Result<Loaded, LoadError> {
    let file = std::fs::File::open(path).map_err(|error| LoadError::Read { path: path.to_path_buf(), error })?;
    let gz = flate2::read::GzDecoder::new(std::io::BufReader::new(file));
    let mut archive = tar::Archive::new(Capped { inner: gz, read: 0 });
    let mut loaded = Loaded::new(index);
    let mut buf = Vec::new();
    let corrupt = |error: std::io::Error| {
        if error.get_ref().is_some_and(|e| e.to_string() == CAP_HIT) {
            LoadError::TooLarge { path: path.to_path_buf() }
        } else {
            LoadError::Corrupt { path: path.to_path_buf(), error }
        }
    };
    let mut entries = 0u64;
    for entry in archive.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        entries += 1;
        if entries > MAX_ENTRIES {
            return Err(LoadError::TooManyEntries { path: path.to_path_buf() });
        }
        let raw = entry.path_bytes();
        let name = String::from_utf8_lossy(&raw).into_owned();
        if !name.ends_with(".json") {
            continue;
        }
        if leaves_the_mirror(&name) {
            loaded.skip(Skip::PathTraversal, &name);
            continue;
        }
        let kind = entry.header().entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            loaded.skip(Skip::Symlink, &name);
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        if entry.size() > MAX_RECORD {
            // Its bytes are passed over by the next `entries` step, under the archive's cap.
            loaded.skip(Skip::TooLarge, &name);
            continue;
        }
        buf.clear();
        match (&mut entry).take(MAX_RECORD + 1).read_to_end(&mut buf) {
            Ok(_) if buf.len() as u64 > MAX_RECORD => loaded.skip(Skip::TooLarge, &name),
            Ok(_) => loaded.record(&buf, &name),
            Err(error) => return Err(corrupt(error)),
        }
    }
    Ok(loaded.finished())
}

//! A `.zip` read one central-directory entry at a time: the directory is walked from the offset
//! its end record gives, for exactly the entries that record claims and never past the bytes it
//! claims, each entry parsed, handed out and dropped; its data is then read from its local header
//! through its compressed size (stored or deflated). Memory stays that of one entry whatever the
//! directory's size (a parser that holds every entry costs ~250 bytes an entry: 254 MiB for
//! Ubuntu's ~1,000,000 records). The caller checks the end record's counts first and bounds what
//! each entry decompresses to.

use std::io::{BufReader, Read, Seek, SeekFrom};

use super::zip_end::Directory;

/// One central-directory entry, as far as reading its data needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name's bytes (UTF-8 or not: the caller shows it lossily).
    pub name: Vec<u8>,
    /// Its compression method: 0 stored, 8 deflated; any other is not read.
    pub method: u16,
    /// Bit 0: encrypted (not read).
    pub flags: u16,
    pub crc32: u32,
    pub compressed: u64,
    /// What the directory claims it decompresses to (it may lie: the reader bounds it).
    pub uncompressed: u64,
    pub local_offset: u64,
    /// Its Unix mode, when the entry was made on Unix (a symbolic link says so there).
    pub unix_mode: Option<u32>,
}

const CENTRAL: [u8; 4] = *b"PK\x01\x02";
const LOCAL: [u8; 4] = *b"PK\x03\x04";
/// The ZIP64 extended information extra field.
const ZIP64_EXTRA: u16 = 0x0001;
/// `version made by`'s upper byte for Unix (its external attributes' upper half is the mode).
const MADE_ON_UNIX: u8 = 3;

fn corrupt(why: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.into())
}

/// The central directory of a zip, walked entry by entry ([`Walk::next_entry`]).
pub struct Walk<R> {
    reader: BufReader<R>,
    /// Entries the end record claims, not yet read.
    entries_left: u64,
    /// Bytes of the directory the end record claims, not yet read.
    bytes_left: u64,
}

impl<R: Read + Seek> Walk<R> {
    /// The walk of `directory` (as the end record of the zip in `file` gives it).
    pub fn new(mut file: R, directory: Directory) -> std::io::Result<Self> {
        file.seek(SeekFrom::Start(directory.offset))?;
        Ok(Walk { reader: BufReader::new(file), entries_left: directory.entries, bytes_left: directory.size })
    }

    /// The next entry; `None` after the last the end record claims. An entry that is not one, or
    /// that runs past the directory's claimed size, is an error (the zip is corrupt).
    pub fn next_entry(&mut self) -> std::io::Result<Option<Entry>> {
        if self.entries_left == 0 {
            return Ok(None);
        }
        self.entries_left -= 1;
        let mut fixed = [0u8; 46];
        self.reader.read_exact(&mut fixed).map_err(|_| corrupt("its central directory ends early"))?;
        if fixed[..4] != CENTRAL {
            return Err(corrupt("an entry of its central directory has no entry signature"));
        }
        let u16_at = |i: usize| u16::from_le_bytes([fixed[i], fixed[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([fixed[i], fixed[i + 1], fixed[i + 2], fixed[i + 3]]);
        let (name_len, extra_len, comment_len) = (u16_at(28), u16_at(30), u16_at(32));
        let size = 46 + u64::from(name_len) + u64::from(extra_len) + u64::from(comment_len);
        self.bytes_left = self
            .bytes_left
            .checked_sub(size)
            .ok_or_else(|| corrupt("its central directory runs past the size its end record gives"))?;
        let mut name = vec![0u8; usize::from(name_len)];
        let mut extra = vec![0u8; usize::from(extra_len)];
        self.reader.read_exact(&mut name).map_err(|_| corrupt("its central directory ends early"))?;
        self.reader.read_exact(&mut extra).map_err(|_| corrupt("its central directory ends early"))?;
        self.reader.seek_relative(i64::from(comment_len))?;
        let mut entry = Entry {
            name,
            method: u16_at(10),
            flags: u16_at(8),
            crc32: u32_at(16),
            compressed: u64::from(u32_at(20)),
            uncompressed: u64::from(u32_at(24)),
            local_offset: u64::from(u32_at(42)),
            unix_mode: (fixed[5] == MADE_ON_UNIX).then(|| u32_at(38) >> 16),
        };
        zip64_sizes(&mut entry, &extra);
        Ok(Some(entry))
    }
}

/// The ZIP64 extra field's values of those of `entry`'s sizes and offset that are `0xFFFFFFFF`,
/// in the field's order (uncompressed, compressed, offset).
fn zip64_sizes(entry: &mut Entry, mut extra: &[u8]) {
    while extra.len() >= 4 {
        let id = u16::from_le_bytes([extra[0], extra[1]]);
        let len = usize::from(u16::from_le_bytes([extra[2], extra[3]]));
        let Some(data) = extra.get(4..4 + len) else { return };
        if id == ZIP64_EXTRA {
            let mut values = data.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
            for field in [&mut entry.uncompressed, &mut entry.compressed, &mut entry.local_offset] {
                if *field == 0xFFFF_FFFF
                    && let Some(value) = values.next()
                {
                    *field = value;
                }
            }
            return;
        }
        extra = &extra[4 + len..];
    }
}

/// The data of `entry`, decompressed, from the zip in `file`: its local header skipped, its
/// compressed bytes read through the directory's size (a data descriptor needs no reading).
/// Refused: an encrypted entry, a method other than stored and deflated.
pub fn open<'a>(file: &'a mut (impl Read + Seek), entry: &Entry) -> std::io::Result<Box<dyn Read + 'a>> {
    if entry.flags & 1 != 0 {
        return Err(corrupt("an encrypted entry"));
    }
    file.seek(SeekFrom::Start(entry.local_offset))?;
    let mut local = [0u8; 30];
    file.read_exact(&mut local)?;
    if local[..4] != LOCAL {
        return Err(corrupt("an entry's local header has no signature"));
    }
    let skip =
        i64::from(u16::from_le_bytes([local[26], local[27]])) + i64::from(u16::from_le_bytes([local[28], local[29]]));
    file.seek(SeekFrom::Current(skip))?;
    let data = file.take(entry.compressed);
    match entry.method {
        0 => Ok(Box::new(data)),
        8 => Ok(Box::new(flate2::read::DeflateDecoder::new(BufReader::new(data)))),
        method => Err(corrupt(format!("compression method {method} (only stored and deflated are read)"))),
    }
}

/// Whether `bytes` (an entry read whole) are what its CRC-32 says.
pub fn crc_matches(entry: &Entry, bytes: &[u8]) -> bool {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum() == entry.crc32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_zip64_field_gives_only_the_values_marked_in_the_entry() {
        let mut entry = Entry {
            name: Vec::new(),
            method: 8,
            flags: 0,
            crc32: 0,
            compressed: 10,
            uncompressed: 0xFFFF_FFFF,
            local_offset: 0xFFFF_FFFF,
            unix_mode: None,
        };
        let mut extra = vec![0x0a, 0, 4, 0, 1, 2, 3, 4];
        extra.extend([1, 0, 16, 0]);
        extra.extend(5_000_000_000u64.to_le_bytes());
        extra.extend(7_000_000_000u64.to_le_bytes());
        zip64_sizes(&mut entry, &extra);
        assert_eq!((entry.uncompressed, entry.compressed, entry.local_offset), (5_000_000_000, 10, 7_000_000_000));
    }
}

//! A `.zip`'s end-of-central-directory record (and its ZIP64 form), read before the central
//! directory is parsed: how many entries the archive claims and how large its directory is, so a
//! zip of millions of entries is refused for the cost of reading its last bytes, not after the
//! directory's entries are all held in memory.

use std::io::{Read, Seek, SeekFrom};

/// What the end of a zip says of its central directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Directory {
    pub entries: u64,
    /// Bytes.
    pub size: u64,
    /// Where it starts in the file.
    pub offset: u64,
}

const EOCD: [u8; 4] = *b"PK\x05\x06";
const ZIP64_LOCATOR: [u8; 4] = *b"PK\x06\x07";
const ZIP64_EOCD: [u8; 4] = *b"PK\x06\x06";
/// The record (22 bytes) and the longest comment after it.
const SEARCHED: u64 = 22 + 0xFFFF;

/// The central directory the end of `file` describes; `None` when it has no end record (the zip
/// reader then says what is wrong). The ZIP64 record is read when the plain one points to it.
pub fn directory(file: &mut (impl Read + Seek)) -> std::io::Result<Option<Directory>> {
    let len = file.seek(SeekFrom::End(0))?;
    let start = len.saturating_sub(SEARCHED);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.take(SEARCHED).read_to_end(&mut tail)?;
    let Some(at) = (0..tail.len().saturating_sub(21)).rev().find(|&i| tail[i..i + 4] == EOCD) else {
        return Ok(None);
    };
    let record = &tail[at..at + 22];
    let u16_at = |i: usize| u64::from(u16::from_le_bytes([record[i], record[i + 1]]));
    let u32_at = |i: usize| u64::from(u32::from_le_bytes([record[i], record[i + 1], record[i + 2], record[i + 3]]));
    let plain = Directory { entries: u16_at(10), size: u32_at(12), offset: u32_at(16) };
    if plain.entries != 0xFFFF && plain.size != 0xFFFF_FFFF && u32_at(16) != 0xFFFF_FFFF {
        return Ok(Some(plain));
    }
    // ZIP64: the locator (20 bytes) just before the record names where the ZIP64 record is.
    let Some(locator) = at.checked_sub(20).map(|l| &tail[l..l + 20]) else { return Ok(Some(plain)) };
    if locator[..4] != ZIP64_LOCATOR {
        return Ok(Some(plain));
    }
    let offset = u64::from_le_bytes(locator[8..16].try_into().unwrap_or_default());
    let mut zip64 = [0u8; 56];
    file.seek(SeekFrom::Start(offset))?;
    if file.read_exact(&mut zip64).is_err() || zip64[..4] != ZIP64_EOCD {
        return Ok(Some(plain));
    }
    let u64_at = |i: usize| u64::from_le_bytes(zip64[i..i + 8].try_into().unwrap_or_default());
    Ok(Some(Directory { entries: u64_at(32), size: u64_at(40), offset: u64_at(48) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of a zip whose directory holds `entries` entries of `size` bytes at `offset`.
    fn end(entries: u64, size: u64, offset: u64, zip64: bool) -> Vec<u8> {
        let mut out = vec![0u8; 100];
        if zip64 {
            let at = out.len() as u64;
            out.extend(ZIP64_EOCD);
            out.extend(44u64.to_le_bytes());
            out.extend([45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            out.extend(entries.to_le_bytes());
            out.extend(entries.to_le_bytes());
            out.extend(size.to_le_bytes());
            out.extend(offset.to_le_bytes());
            out.extend(ZIP64_LOCATOR);
            out.extend(0u32.to_le_bytes());
            out.extend(at.to_le_bytes());
            out.extend(1u32.to_le_bytes());
        }
        let small = |v: u64, max: u64| if zip64 { max } else { v };
        out.extend(EOCD);
        out.extend([0, 0, 0, 0]);
        out.extend((small(entries, 0xFFFF) as u16).to_le_bytes());
        out.extend((small(entries, 0xFFFF) as u16).to_le_bytes());
        out.extend((small(size, 0xFFFF_FFFF) as u32).to_le_bytes());
        out.extend((small(offset, 0xFFFF_FFFF) as u32).to_le_bytes());
        out.extend(3u16.to_le_bytes());
        out.extend(b"hey");
        out
    }

    #[test]
    fn the_plain_and_the_zip64_records_are_read() {
        let mut plain = std::io::Cursor::new(end(12, 600, 0, false));
        assert_eq!(directory(&mut plain).unwrap(), Some(Directory { entries: 12, size: 600, offset: 0 }));
        let mut zip64 = std::io::Cursor::new(end(2_000_000, 104_000_000, 7, true));
        let expected = Directory { entries: 2_000_000, size: 104_000_000, offset: 7 };
        assert_eq!(directory(&mut zip64).unwrap(), Some(expected));
        assert_eq!(directory(&mut std::io::Cursor::new(vec![0u8; 40])).unwrap(), None);
    }
}

//! The daemon's binary as linked: what `build.rs` asks of the linker is in the file.

use crate::support::daemon::BINARY;

/// Each section's name and size, from an ELF64 little-endian file's section headers.
fn sections(elf: &[u8]) -> Vec<(String, u64)> {
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    assert_eq!(&elf[..5], b"\x7fELF\x02", "an ELF64 file");
    let (offset, size, count, names) = (u64_at(0x28) as usize, u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| offset + i * size;
    let strings = u64_at(header(names) + 0x18) as usize;
    (0..count)
        .map(|i| {
            let start = strings + u32_at(header(i));
            let end = start + elf[start..].iter().position(|b| *b == 0).unwrap();
            (String::from_utf8_lossy(&elf[start..end]).into_owned(), u64_at(header(i) + 0x20))
        })
        .collect()
}

/// Packed relative relocations: as `.rela.dyn` entries the loader reads ~1.9 MB at every start,
/// and those pages stay resident (5 MiB of RSS at 10,000 tags, docs/performance.md).
#[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"))]
#[test]
fn the_binary_packs_its_relative_relocations() {
    let elf = std::fs::read(BINARY).expect("read the daemon's binary");
    let sections = sections(&elf);
    let size = |name: &str| sections.iter().find(|(n, _)| n == name).map(|(_, s)| *s);
    assert!(size(".relr.dyn").is_some(), "no .relr.dyn: build.rs's -z pack-relative-relocs did not reach the linker");
    let rela = size(".rela.dyn").unwrap_or(0);
    assert!(rela < 64 << 10, ".rela.dyn is {rela} bytes: the relative relocations are not packed");
}

//! Memory the process no longer needs, given back to the kernel: the pages of this executable's
//! code and read-only data that start-up and the first check cycle touched (config parsing, TLS
//! set-up, the ledger's opening, pinning every tag), and the heap's free pages. Linux with glibc
//! only; elsewhere every function is a no-op.
//!
//! The code pages are file-backed: `madvise(MADV_DONTNEED)` on a private file mapping that was
//! never written only drops our page table entries. The pages stay in the page cache, and the
//! code a steady check runs faults back in on its next use. A private mapping that *was*
//! written (the relocated RELRO segment, `.data`, `.bss`) holds anonymous copies that DONTNEED
//! would throw away, so only mappings that are not writable and hold no anonymous or swapped page
//! are advised; `/proc/self/smaps` says which.
// The one audited exception to `#![deny(unsafe_code)]` besides `runner::group::die_with_daemon`.
#![allow(unsafe_code)]

/// What one [`release`] gave back.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The executable's mappings advised (code and read-only data).
    pub mappings: usize,
    /// Their pages resident before, in KiB: what left this process's RSS.
    pub code_kib: u64,
    /// Whether glibc returned free heap pages.
    pub heap_trimmed: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("cannot read {what} (is /proc mounted?): {source}")]
    Proc { what: &'static str, source: std::io::Error },
    #[error("madvise(MADV_DONTNEED) on {range} of the executable failed: {source}")]
    Advise { range: String, source: std::io::Error },
}

/// One mapping of `/proc/self/smaps`: what [`advisable`] decides on.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    perms: String,
    path: String,
    rss_kib: u64,
    anonymous_kib: u64,
    swap_kib: u64,
}

/// Reads `smaps` text into its mappings (the header line, then the `Rss`, `Anonymous` and `Swap`
/// fields of each).
fn mappings(smaps: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let mut words = line.split_ascii_whitespace();
        let Some(first) = words.next() else { continue };
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16))
        {
            let perms = words.next().unwrap_or_default().to_string();
            // offset, device, inode; the path is the rest of the line (it may hold spaces).
            let path = line.splitn(6, |c: char| c.is_ascii_whitespace()).nth(5).unwrap_or_default().trim_start();
            out.push(Mapping { start, end, perms, path: path.to_string(), ..Mapping::default() });
            continue;
        }
        let (Some(current), Some(kib)) = (out.last_mut(), words.next().and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match first {
            "Rss:" => current.rss_kib = kib,
            "Anonymous:" => current.anonymous_kib = kib,
            "Swap:" => current.swap_kib = kib,
            _ => {}
        }
    }
    out
}

/// Whether DONTNEED on `mapping` only drops page table entries of `exe`'s file pages: a private
/// (`p`), not writable mapping of this executable with resident pages, none of them an anonymous
/// copy (a relocated page) or swapped out.
fn advisable(mapping: &Mapping, exe: &str) -> bool {
    let perms = mapping.perms.as_bytes();
    mapping.path == exe
        && perms.len() == 4
        && perms[0] == b'r'
        && perms[1] != b'w'
        && perms[3] == b'p'
        && mapping.anonymous_kib == 0
        && mapping.swap_kib == 0
        && mapping.rss_kib > 0
}

/// Drops this executable's resident code and read-only data from the page tables, then trims the
/// heap. Safe at any time: a page used again faults back in from the page cache.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release() -> Result<Released, MemoryError> {
    let exe =
        std::fs::read_link("/proc/self/exe").map_err(|source| MemoryError::Proc { what: "/proc/self/exe", source })?;
    // As smaps spells the path (a replaced binary is "… (deleted)" in both).
    let exe = exe.to_string_lossy();
    let smaps = std::fs::read_to_string("/proc/self/smaps")
        .map_err(|source| MemoryError::Proc { what: "/proc/self/smaps", source })?;
    let mut released = Released::default();
    for mapping in mappings(&smaps).iter().filter(|m| advisable(m, &exe)) {
        // SAFETY: the range is one whole mapping of the executable's file, private, not writable,
        // and smaps showed no anonymous (written) or swapped page in it: DONTNEED drops only page
        // table entries of page-cache pages, and any use faults the same bytes back in. Nothing
        // here writes read-only mappings afterwards (only a debugger's breakpoint would).
        let result = unsafe {
            libc::madvise(mapping.start as *mut libc::c_void, mapping.end - mapping.start, libc::MADV_DONTNEED)
        };
        if result != 0 {
            let range = format!("{:x}-{:x} {}", mapping.start, mapping.end, mapping.perms);
            return Err(MemoryError::Advise { range, source: std::io::Error::last_os_error() });
        }
        released.mappings += 1;
        released.code_kib += mapping.rss_kib;
    }
    released.heap_trimmed = trim_heap();
    Ok(released)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release() -> Result<Released, MemoryError> {
    Ok(Released::default())
}

/// Gives freed heap back to the kernel (after a large parse: the config, an OSV mirror; after
/// start-up): glibc keeps free pages between the allocations that stay. True when some were.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn trim_heap() -> bool {
    // SAFETY: malloc_trim is thread-safe, takes no pointer and only returns free pages.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim_heap() -> bool {
    false
}

/// Keeps glibc to one malloc arena. By default every thread that meets a locked arena gets its
/// own (up to 8 per core), and memory freed in one is never reused by another: at 10,000 builders
/// the daemon's heap was spread over nine arenas, 2.2 MiB more than with one (measured with
/// `MALLOC_ARENA_MAX=1`). Small allocations go through glibc's per-thread cache without the
/// arena's lock, so two cores' workers do not queue on it. Call before any thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn use_one_malloc_arena() {
    // SAFETY: mallopt takes no pointer; M_ARENA_MAX only caps arenas created from now on.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn use_one_malloc_arena() {}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    const SMAPS: &str = "\
55d0c0000000-55d0c088e000 r--p 00000000 fd:01 1234 /opt/bm/builder-monitor
Rss:                1200 kB
Anonymous:             0 kB
Swap:                  0 kB
55d0c088e000-55d0c216b000 r-xp 0088d000 fd:01 1234 /opt/bm/builder-monitor
Size:              25460 kB
Rss:               21700 kB
Anonymous:             0 kB
Swap:                  0 kB
55d0c216c000-55d0c2278000 r--p 0216a000 fd:01 1234 /opt/bm/builder-monitor
Rss:                1064 kB
Anonymous:          1060 kB
Swap:                  0 kB
55d0c2278000-55d0c2281000 rw-p 02275000 fd:01 1234 /opt/bm/builder-monitor
Rss:                  36 kB
Anonymous:             0 kB
Swap:                  0 kB
55d0c2300000-55d0c2400000 r-xp 00000000 fd:01 99 /opt/bm/other name.so
Rss:                 400 kB
Anonymous:             0 kB
7f0000000000-7f0000100000 r--s 00000000 fd:01 1234 /opt/bm/builder-monitor
Rss:                  64 kB
Anonymous:             0 kB
7f0000200000-7f0000300000 r--p 00000000 fd:01 1234 /opt/bm/builder-monitor
Rss:                  64 kB
Anonymous:             0 kB
Swap:                  8 kB
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
Rss:                 800 kB
Anonymous:           800 kB
";

    #[test]
    fn only_the_executables_unwritten_read_only_private_mappings_are_advised() {
        let all = mappings(SMAPS);
        assert_eq!(all.len(), 8);
        assert_eq!(all[4].path, "/opt/bm/other name.so");
        assert_eq!(all[7].path, "");
        let chosen: Vec<&str> =
            all.iter().filter(|m| advisable(m, "/opt/bm/builder-monitor")).map(|m| m.perms.as_str()).collect();
        // Not the relocated RELRO (anonymous copies), .data, another file, a shared mapping, a
        // mapping with swapped pages, or the heap.
        assert_eq!(chosen, ["r--p", "r-xp"]);
        assert_eq!(all[1].start, 0x55d0c088e000);
        assert_eq!(all[1].rss_kib, 21700);
    }

    /// This test binary's resident code: the executable's `r-x` mappings, in KiB.
    fn resident_code_kib() -> u64 {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let exe = exe.to_string_lossy();
        mappings(&smaps).iter().filter(|m| m.path == exe && m.perms == "r-xp").map(|m| m.rss_kib).sum()
    }

    #[test]
    fn the_executables_code_leaves_the_resident_set_and_comes_back_on_use() {
        // Touch every page of the code (reading it as data faults it in, as running it would).
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let code: Vec<Mapping> =
            mappings(&smaps).into_iter().filter(|m| m.path == exe.to_string_lossy() && m.perms == "r-xp").collect();
        let mut sum = 0u64;
        for m in &code {
            for page in (m.start..m.end).step_by(4096) {
                // SAFETY: a readable mapping of this process, one byte of each of its pages.
                sum = sum.wrapping_add(u64::from(unsafe { std::ptr::read_volatile(page as *const u8) }));
            }
        }
        std::hint::black_box(sum);
        let touched: u64 = code.iter().map(|m| (m.end - m.start) as u64 / 1024).sum();
        let before = resident_code_kib();
        assert!(before * 10 >= touched * 9, "{before} KiB of {touched} KiB resident after touching it all");

        let released = release().unwrap();

        let after = resident_code_kib();
        assert!(released.mappings >= 1 && released.code_kib >= touched / 2, "{released:?}");
        // Other tests run code meanwhile and fault some back in; far from all of it.
        assert!(after < before / 2, "resident code {before} KiB before the release, {after} KiB after");
        // And code runs on: this call, and the parser's, fault their pages back in.
        assert_eq!(mappings(SMAPS).len(), 8);
    }

    static COUNTER: AtomicU64 = AtomicU64::new(1);
    /// Pointers: in the relocated (RELRO) segment of a position-independent executable.
    static NAMES: [&str; 3] = ["builder", "run image", "app"];
    static PARSE: fn(&str) -> Vec<Mapping> = mappings;

    #[test]
    fn written_and_relocated_statics_keep_their_values() {
        COUNTER.store(0x5eed_cafe, Ordering::SeqCst);
        release().unwrap();
        assert_eq!(COUNTER.load(Ordering::SeqCst), 0x5eed_cafe);
        let names = std::hint::black_box(&NAMES);
        assert_eq!(names.join(","), "builder,run image,app");
        let parse = std::hint::black_box(&PARSE);
        assert_eq!(parse(SMAPS).len(), 8);
    }

    #[test]
    fn free_heap_pages_between_live_blocks_go_back() {
        fn rss_anon_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
            line.split_ascii_whitespace().nth(1).unwrap().parse().unwrap()
        }
        // 64 MiB in 16 KiB blocks (below glibc's mmap threshold: they come from the heap), every
        // page written; then all freed but every 16th, which keeps the free runs between them.
        let mut blocks: Vec<Vec<u8>> = (0..4096).map(|i| vec![i as u8 | 1; 16 * 1024]).collect();
        let kept: Vec<Vec<u8>> = blocks.iter_mut().step_by(16).map(std::mem::take).collect();
        drop(blocks);
        let before = rss_anon_kib();
        assert!(release().unwrap().heap_trimmed);
        let after = rss_anon_kib();
        assert!(after + 32 * 1024 < before, "anonymous RSS {before} KiB before the release, {after} KiB after");
        assert!(kept.iter().all(|b| b.len() == 16 * 1024 && b[0] & 1 == 1));
    }
}

//! Link-time settings of the daemon's binary.
//!
//! On Linux with glibc the binary is linked with packed relative relocations (`DT_RELR`, glibc
//! 2.36 and GNU ld 2.38 or later; an older linker warns and links without them). A position
//! independent executable of this size carries ~80,000 relative relocations: as `.rela.dyn`
//! entries (24 bytes each, 1.9 MB) the dynamic loader reads every one at start, and those pages
//! stay resident for the process's life; packed they are 17 KB. Measured at 10,000 tags with the
//! `release` binary: peak RSS 44.1 → 39.0 MiB, nearly all of it file-backed (docs/performance.md,
//! round 4). Only the binaries are linked so: the test binaries do not need it.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

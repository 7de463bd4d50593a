//! The OS package list of one platform image: the config's Paketo label when present (no request),
//! else the base-image SBOM layer its label names (one blob GET, capped; unpacked and parsed as a
//! stream, never held unpacked).

use std::io::Read;

use serde::Deserialize;

use crate::registry::{Registry, RegistryError};
use builder_monitor_core::packages::{self, Lookup, PackageList, Packages, Source};
use builder_monitor_core::reference::ImageRef;

/// Largest SBOM layer fetched, compressed (real ones: a few hundred KiB).
pub const MAX_SBOM_LAYER_BYTES: usize = 8 << 20;
/// Most bytes unpacked from an SBOM layer: a compression bomb stops here.
const MAX_UNPACKED_BYTES: u64 = 64 << 20;

/// A layer of an image manifest.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LayerDoc {
    pub digest: String,
    #[serde(default, rename = "mediaType")]
    pub media_type: String,
    #[serde(default)]
    pub size: Option<u64>,
}

/// The package list of the image with this config and these layers; `None` when it carries
/// neither label. Trouble with the SBOM layer is a note in the result, never an error.
pub async fn platform_packages(
    registry: &Registry,
    image: &ImageRef,
    config: &[u8],
    layers: &[LayerDoc],
) -> Option<Packages> {
    let (diff_id, position) = match packages::lookup(config) {
        Lookup::Absent => return None,
        Lookup::Found(found) => return Some(found),
        Lookup::SbomLayer { diff_id, position } => (diff_id, position),
    };
    let Some(layer) = layers.get(position) else {
        return Some(Packages::unreadable(format!(
            "the SBOM layer {diff_id} is layer {} of the config, but the manifest has {} layers",
            position + 1,
            layers.len()
        )));
    };
    if let Some(size) = layer.size.filter(|s| *s > MAX_SBOM_LAYER_BYTES as u64) {
        return Some(over_cap(size));
    }
    match registry.get_blob(image, &layer.digest, MAX_SBOM_LAYER_BYTES).await {
        Ok(blob) => Some(read_sbom_layer(&blob)),
        Err(err) => Some(Packages::unreadable(match err {
            RegistryError::InvalidResponse { detail, .. } if detail.contains("limit") => {
                format!("the SBOM layer is over the {MAX_SBOM_LAYER_BYTES}-byte limit; not read")
            }
            other => format!("the SBOM layer {} could not be fetched: {other}", layer.digest),
        })),
    }
}

fn over_cap(size: u64) -> Packages {
    Packages::unreadable(format!(
        "the SBOM layer is {size} bytes, over the {MAX_SBOM_LAYER_BYTES}-byte limit; not read"
    ))
}

/// A reader that fails past `left` bytes, so a bomb is told apart from a short archive.
struct Capped<R> {
    inner: R,
    left: u64,
    cap: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self
            .left
            .checked_sub(n as u64)
            .ok_or_else(|| std::io::Error::other(format!("the SBOM layer unpacks to over {} bytes", self.cap)))?;
        Ok(n)
    }
}

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// The package list in an SBOM layer blob (gzip, zstd or plain tar, told by its first bytes, which
/// unlike a media type cannot disagree with the content): `cnb/sbom/bom.<ext>.json`, CycloneDX
/// preferred over SPDX over Syft when it holds several.
pub fn read_sbom_layer(blob: &[u8]) -> Packages {
    read_capped(blob, MAX_UNPACKED_BYTES)
}

fn read_capped(blob: &[u8], cap: u64) -> Packages {
    let reader: Box<dyn Read + '_> = if blob.starts_with(GZIP_MAGIC) {
        Box::new(flate2::read::GzDecoder::new(blob))
    } else if blob.starts_with(ZSTD_MAGIC) {
        match ruzstd::decoding::StreamingDecoder::new(blob) {
            Ok(decoder) => Box::new(decoder),
            Err(e) => return Packages::unreadable(format!("the SBOM layer is not valid zstd: {e}")),
        }
    } else {
        Box::new(blob)
    };
    let mut archive = tar::Archive::new(Capped { inner: reader, left: cap, cap });
    let not_tar = |e: std::io::Error| Packages::unreadable(format!("the SBOM layer is not a readable tar: {e}"));
    let mut best: Option<(Source, Result<PackageList, String>)> = None;
    let entries = match archive.entries() {
        Ok(entries) => entries,
        Err(e) => return not_tar(e),
    };
    for entry in entries {
        let mut entry = match entry {
            Ok(entry) => entry,
            Err(e) => return not_tar(e),
        };
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let source = match entry.path() {
            Ok(path) => path.to_str().and_then(Source::of_sbom_path),
            Err(_) => None,
        };
        let Some(source) = source else { continue };
        if best.as_ref().is_some_and(|(kept, _)| rank(*kept) <= rank(source)) {
            continue;
        }
        // Parsed as it is unpacked: a list over the cap is cut, its read stopped at entry 5,001,
        // so neither the document (up to the unpacked cap) nor its entries are ever held whole.
        best = Some((source, packages::parse_sbom_from(source, &mut entry)));
        if rank(source) == 0 {
            // Nothing later can be preferred: the rest of the layer is not unpacked.
            break;
        }
    }
    match best {
        Some((source, parsed)) => Packages::from_result(source, parsed),
        None => Packages::unreadable("the SBOM layer holds no cnb/sbom/bom.<cdx|spdx|syft>.json"),
    }
}

fn rank(source: Source) -> usize {
    Source::SBOM.iter().position(|s| *s == source).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in files {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, path, *content).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    const CDX: &[u8] = br#"{"components": [{"name": "openssl", "version": "3.0.2-0ubuntu1.16"}]}"#;
    const SYFT: &[u8] = br#"{"artifacts": [{"name": "openssl", "version": "3.0.2-0ubuntu1.16"}]}"#;

    fn source_of(p: &Packages) -> Option<Source> {
        match p {
            Packages::Listed { source, packages, .. } => {
                assert_eq!(packages[0].name, "openssl");
                Some(*source)
            }
            Packages::Unreadable { .. } => None,
        }
    }

    #[test]
    fn reads_plain_and_gzip_layers_preferring_cyclonedx() {
        let layer = tar_of(&[("cnb/sbom/bom.syft.json", SYFT), ("cnb/sbom/bom.cdx.json", CDX), ("etc/x", b"x")]);
        assert_eq!(source_of(&read_sbom_layer(&layer)), Some(Source::CycloneDx));
        assert_eq!(source_of(&read_sbom_layer(&gzip(&layer))), Some(Source::CycloneDx));
        let syft_only = tar_of(&[("./cnb/sbom/bom.syft.json", SYFT)]);
        assert_eq!(source_of(&read_sbom_layer(&gzip(&syft_only))), Some(Source::Syft));
    }

    #[test]
    fn reads_zstd_layers() {
        // The system's zstd, so the frame is a real encoder's.
        let layer = tar_of(&[("cnb/sbom/bom.cdx.json", CDX)]);
        let mut child = std::process::Command::new("zstd")
            .args(["-q", "-c"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("zstd is installed");
        child.stdin.take().unwrap().write_all(&layer).unwrap();
        let compressed = child.wait_with_output().unwrap().stdout;
        assert!(compressed.starts_with(ZSTD_MAGIC));
        assert_eq!(source_of(&read_sbom_layer(&compressed)), Some(Source::CycloneDx));
    }

    #[test]
    fn bad_layers_are_notes() {
        let note = |p: Packages| match p {
            Packages::Unreadable { note } => note,
            other => panic!("{other:?}"),
        };
        assert!(note(read_sbom_layer(&[0x1f, 0x8b, 1, 2, 3])).contains("not a readable tar"));
        assert!(note(read_sbom_layer(&[0x28, 0xb5, 0x2f, 0xfd, 0xff])).contains("zstd"));
        let json = br#"{"components": []} and some more bytes to fill a header block"#.repeat(20);
        assert!(note(read_sbom_layer(&json)).contains("not a readable tar"));
        assert!(note(read_sbom_layer(&tar_of(&[("etc/os-release", b"x")]))).contains("holds no cnb/sbom"));
        let bad_doc = tar_of(&[("cnb/sbom/bom.spdx.json", b"{")]);
        assert!(note(read_sbom_layer(&bad_doc)).contains("sbom:spdx document is malformed"));
        // A file larger than the unpacked cap: stopped there, not read whole.
        let mut spaces = br#"{"components": ["#.to_vec();
        spaces.resize(4 << 20, b' ');
        let bomb = gzip(&tar_of(&[("cnb/sbom/bom.cdx.json", &spaces)]));
        assert!(bomb.len() < 64 << 10);
        assert!(note(read_capped(&bomb, 1 << 20)).contains("unpacks to over 1048576 bytes"));
        assert!(!note(read_capped(&bomb, 8 << 20)).contains("unpacks to over"));
    }

    #[test]
    fn a_list_over_the_cap_stops_the_unpacking_there() {
        // 20 million empty components: 60 MB unpacked, ~60 KB of gzip, cut at entry 5,001.
        // Written as it is compressed: the test never holds the document either.
        let (open, chunk, close) = (br#"{"components":["#, "{},".repeat(100_000), b"{}]}");
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let mut header = tar::Header::new_gnu();
        header.set_path("cnb/sbom/bom.cdx.json").unwrap();
        header.set_size((open.len() + 200 * chunk.len() + close.len()) as u64);
        header.set_mode(0o644);
        header.set_cksum();
        encoder.write_all(header.as_bytes()).unwrap();
        encoder.write_all(open).unwrap();
        for _ in 0..200 {
            encoder.write_all(chunk.as_bytes()).unwrap();
        }
        encoder.write_all(close).unwrap();
        let layer = encoder.finish().unwrap();
        assert!(layer.len() < 256 << 10, "{} bytes of gzip", layer.len());
        let cut = Packages::Listed { source: Source::CycloneDx, packages: Vec::new(), cut_at: Some(5_000) };
        assert_eq!(read_sbom_layer(&layer), cut);
    }
}

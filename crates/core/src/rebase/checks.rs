//! The compatibility checks the lifecycle's rebaser makes before it moves an app: platform API,
//! stack id and mixins, target (os, architecture, variant, distro) and the run image's name.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{Refusal, malformed};
use crate::reference::{ImageRef, is_sha256_digest};

pub(super) const REBASABLE: &str = "io.buildpacks.rebasable";
pub(super) const STACK_PREFIX: &str = "io.buildpacks.stack.";
pub(super) const BASE_PREFIX: &str = "io.buildpacks.base.";
const DISTRO_NAME: &str = "io.buildpacks.base.distro.name";
const DISTRO_VERSION: &str = "io.buildpacks.base.distro.version";
pub(super) const PLATFORM_API_ENV: &str = "CNB_PLATFORM_API";

/// Whether the app's platform API (its `CNB_PLATFORM_API`) is 0.12 or later; unset means older.
pub(super) fn platform_api_at_least_0_12(api: Option<&str>) -> Result<bool, Refusal> {
    let Some(api) = api.map(str::trim).filter(|a| !a.is_empty()) else { return Ok(false) };
    let mut parts = api.split('.');
    let mut number = || -> Result<u64, Refusal> {
        match parts.next() {
            None => Ok(0),
            Some(p) => p.parse().or_else(|_| malformed("CNB_PLATFORM_API", format!("{api:?} is not a version"))),
        }
    };
    let (major, minor) = (number()?, number()?);
    Ok((major, minor) >= (0, 12))
}

/// A JSON string-array label (mixins); an unset or empty label is an empty list.
pub(super) fn string_list_label(labels: &BTreeMap<String, String>, key: &'static str) -> Result<Vec<String>, Refusal> {
    match labels.get(key).map(String::as_str) {
        None | Some("") => Ok(Vec::new()),
        Some(text) => {
            serde_json::from_str(text).or_else(|e| malformed(key, format!("not a JSON list of strings ({e})")))
        }
    }
}

pub(super) fn stage_stripped(mixins: Vec<String>) -> Vec<String> {
    mixins
        .into_iter()
        .map(|m| match m.strip_prefix("build:").or_else(|| m.strip_prefix("run:")) {
            Some(rest) => rest.to_string(),
            None => m,
        })
        .collect()
}

/// What the rebaser compares for API >= 0.12: os, arch, variant and distro (when the labels exist).
pub(super) struct Target {
    os: String,
    arch: String,
    variant: Option<String>,
    distro: Option<(String, String)>,
}

pub(super) fn target(config: &Map<String, Value>, labels: &BTreeMap<String, String>) -> Target {
    let field = |key: &str| config.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    let name = labels.get(DISTRO_NAME);
    let version = labels.get(DISTRO_VERSION);
    Target {
        os: field("os"),
        arch: field("architecture"),
        variant: Some(field("variant")).filter(|v| !v.is_empty()),
        distro: (name.is_some() || version.is_some())
            .then(|| (name.cloned().unwrap_or_default(), version.cloned().unwrap_or_default())),
    }
}

/// The lifecycle's `TargetSatisfiedForRebase`: empty optional fields of either side match anything;
/// a run image with a distro needs an app with the same one.
pub(super) fn check_target(app: &Target, base: &Target, full: bool) -> Result<(), Refusal> {
    let os_arch = |t: &Target| format!("{}/{}", t.os, t.arch);
    if app.os != base.os || app.arch != base.arch {
        return Err(Refusal::TargetMismatch { what: "os/architecture", app: os_arch(app), run_image: os_arch(base) });
    }
    if !full {
        return Ok(());
    }
    if let (Some(a), Some(b)) = (&app.variant, &base.variant)
        && a != b
    {
        return Err(Refusal::TargetMismatch { what: "variant", app: a.clone(), run_image: b.clone() });
    }
    if let Some((base_name, base_version)) = &base.distro {
        let shown = |d: &Option<(String, String)>| match d {
            Some((n, v)) => format!("{n} {v}").trim().to_string(),
            None => "(none)".to_string(),
        };
        let fits = app.distro.as_ref().is_some_and(|(name, version)| {
            (base_name.is_empty() || base_name == name) && (base_version.is_empty() || base_version == version)
        });
        if !fits {
            return Err(Refusal::TargetMismatch {
                what: "distro",
                app: shown(&app.distro),
                run_image: shown(&base.distro),
            });
        }
    }
    Ok(())
}

/// A reference's name for comparison: digest dropped, `latest` when untagged, Docker Hub normalised.
/// An unparsable one compares as written, like the lifecycle's `ParseMaybe`.
fn comparable_name(text: &str) -> String {
    match ImageRef::parse(text) {
        Ok(r) => r.with_tag_only(),
        Err(_) => text.to_string(),
    }
}

/// Whether `name` is `image` or one of `mirrors` in a `runImage`-shaped object.
pub(super) fn names_contain(run_image: Option<&Value>, name: &str) -> bool {
    let Some(run_image) = run_image else { return false };
    let wanted = comparable_name(name);
    let image = run_image.get("image").and_then(Value::as_str).filter(|i| !i.is_empty());
    let mirrors = run_image.get("mirrors").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
    image.into_iter().chain(mirrors).any(|candidate| comparable_name(candidate) == wanted)
}

/// The digest of a digest reference (`repo@sha256:…`), or the text when it is a bare digest.
pub(super) fn reference_digest(reference: &str) -> Option<&str> {
    let digest = reference.rsplit_once('@').map_or(reference, |(_, d)| d);
    is_sha256_digest(digest).then_some(digest)
}

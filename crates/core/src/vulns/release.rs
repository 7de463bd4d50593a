//! Which Ubuntu release an image is, as the OSV ecosystem its records name: from the CNB distro
//! labels, else from the stack id.
//!
//! Ubuntu's OSV data names an LTS release `Ubuntu:22.04:LTS` (every `YY.04` with an even `YY`) and
//! an interim one without the suffix (`Ubuntu:24.10`); the interim form is assumed from that
//! convention (no interim record was at hand to check), and public CNB base images are LTS.

use super::Release;

/// The stack ids of the Ubuntu-based CNB stacks, and their release.
const STACKS: [(&str, &str); 4] = [
    ("io.buildpacks.stacks.bionic", "18.04"),
    ("io.buildpacks.stacks.focal", "20.04"),
    ("io.buildpacks.stacks.jammy", "22.04"),
    ("io.buildpacks.stacks.noble", "24.04"),
];

/// The release of an image from `io.buildpacks.base.distro.name`/`.version` (`ubuntu`, `22.04`),
/// else from its stack id (`io.buildpacks.stacks.jammy` = 22.04, `noble` = 24.04, …); `None` for
/// anything else.
///
/// A distro other than Ubuntu is `None` whatever the stack id says; an Ubuntu distro whose version
/// is not `YY.MM` (a point release `22.04.3` reads as `22.04`) falls back to the stack id.
pub fn release_of(distro_name: Option<&str>, distro_version: Option<&str>, stack_id: Option<&str>) -> Option<Release> {
    let distro_name = distro_name.map(str::trim).filter(|name| !name.is_empty());
    if let Some(name) = distro_name {
        if !name.eq_ignore_ascii_case("ubuntu") {
            return None;
        }
        if let Some(release) = distro_version.and_then(ecosystem) {
            return Some(release);
        }
    }
    let stack_id = stack_id?.trim();
    STACKS.iter().find(|(id, _)| *id == stack_id).and_then(|(_, version)| ecosystem(version))
}

/// `22.04` → `Ubuntu:22.04:LTS`, `24.10` → `Ubuntu:24.10`.
fn ecosystem(version: &str) -> Option<Release> {
    let mut parts = version.trim().split('.');
    let (year, month) = (parts.next()?, parts.next()?);
    let point_release_ok =
        parts.next().is_none_or(|point| !point.is_empty() && point.bytes().all(|b| b.is_ascii_digit()));
    let two_digits = |part: &str| part.len() == 2 && part.bytes().all(|b| b.is_ascii_digit());
    if !two_digits(year) || !two_digits(month) || !point_release_ok || parts.next().is_some() {
        return None;
    }
    let even_year = (year.as_bytes()[1] - b'0').is_multiple_of(2);
    Some(Release(if month == "04" && even_year {
        format!("Ubuntu:{year}.{month}:LTS")
    } else {
        format!("Ubuntu:{year}.{month}")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(text: &str) -> Option<Release> {
        Some(Release(text.into()))
    }

    #[test]
    fn distro_labels_name_the_release() {
        assert_eq!(release_of(Some("ubuntu"), Some("22.04"), None), release("Ubuntu:22.04:LTS"));
        assert_eq!(
            release_of(Some("Ubuntu"), Some("24.04"), Some("io.buildpacks.stacks.jammy")),
            release("Ubuntu:24.04:LTS")
        );
        assert_eq!(release_of(Some("ubuntu"), Some("22.04.3"), None), release("Ubuntu:22.04:LTS"));
        assert_eq!(release_of(Some("ubuntu"), Some("24.10"), None), release("Ubuntu:24.10"));
        assert_eq!(release_of(Some("ubuntu"), Some("23.04"), None), release("Ubuntu:23.04"));
        assert_eq!(release_of(Some("debian"), Some("12"), Some("io.buildpacks.stacks.jammy")), None);
    }

    #[test]
    fn the_stack_id_is_the_fallback() {
        assert_eq!(release_of(None, None, Some("io.buildpacks.stacks.jammy")), release("Ubuntu:22.04:LTS"));
        assert_eq!(release_of(None, None, Some("io.buildpacks.stacks.noble")), release("Ubuntu:24.04:LTS"));
        assert_eq!(release_of(None, None, Some("io.buildpacks.stacks.focal")), release("Ubuntu:20.04:LTS"));
        assert_eq!(release_of(None, None, Some("io.buildpacks.stacks.bionic")), release("Ubuntu:18.04:LTS"));
        assert_eq!(
            release_of(Some("ubuntu"), Some("jammy"), Some("io.buildpacks.stacks.noble")),
            release("Ubuntu:24.04:LTS")
        );
        assert_eq!(release_of(Some(""), None, Some("io.buildpacks.stacks.jammy")), release("Ubuntu:22.04:LTS"));
    }

    #[test]
    fn anything_else_is_no_release() {
        assert_eq!(release_of(None, None, None), None);
        assert_eq!(release_of(None, None, Some("heroku-22")), None);
        assert_eq!(release_of(None, None, Some("io.buildpacks.stacks.jammy.tiny")), None);
        assert_eq!(release_of(Some("ubuntu"), None, None), None);
        for bad in ["22", "22.4", "2204", "22.04.", "22.04.1.1", "ab.cd", "", "22.04 "] {
            let expected = if bad == "22.04 " { release("Ubuntu:22.04:LTS") } else { None };
            assert_eq!(release_of(Some("ubuntu"), Some(bad), None), expected, "{bad:?}");
        }
    }
}

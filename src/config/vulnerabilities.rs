//! `[vulnerabilities]`: where the operator's mirror of Ubuntu's OSV records is (a directory, a
//! `.tar.gz`, or an `http(s)://` archive the daemon downloads and refreshes) and how often a
//! downloaded one is asked for again. A local mirror that is not there is an error when the
//! config's files are resolved (`run`, `check`), naming the path.

use std::path::PathBuf;
use std::time::Duration;

use builder_monitor_core::vulns::{Release, release_of};
use serde::Deserialize;
use toml::Spanned;

use super::*;

/// How often a downloaded mirror is asked for again, by default, and at the least.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(6 * 3600);
pub const MIN_REFRESH: Duration = Duration::from_secs(60);

/// Where the OSV records come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OsvSource {
    /// Every `*.json` under it, recursively (Ubuntu's `osv/usn` + `osv/cve/<year>`, or OSV.dev's
    /// flat export).
    Dir(PathBuf),
    /// A gzip-compressed tar (`.tar.gz`, `.tgz`) or a `.zip` of such a tree.
    Archive(PathBuf),
    /// A `.tar.gz` or `.zip` downloaded (conditionally) every `refresh`, kept under the state
    /// directory.
    Url(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VulnerabilitySettings {
    pub osv: OsvSource,
    /// For a URL only: how often it is asked for again.
    pub refresh: Duration,
    /// Releases whose records are loaded at start whatever is pinned (`releases = ["22.04"]`);
    /// the pinned images' own releases are loaded too, and any other when a move needs it.
    pub releases: Vec<Release>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVulnerabilities {
    osv: Spanned<String>,
    refresh: Option<Spanned<DurationText>>,
    #[serde(default)]
    releases: Vec<Spanned<String>>,
}

impl<'a> Validator<'a> {
    pub(super) fn vulnerabilities(&mut self, raw: RawVulnerabilities) -> Option<VulnerabilitySettings> {
        let text = raw.osv.get_ref().trim();
        let span = raw.osv.span();
        let osv = if text.is_empty() {
            self.error(span, "osv is empty: give the OSV mirror's directory, .tar.gz file or https:// URL");
            return None;
        } else if let Some(rest) = text.strip_prefix("https://").or_else(|| text.strip_prefix("http://")) {
            let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
            if host.is_empty() {
                self.error(span, format!("osv URL \"{text}\" names no host"));
                return None;
            }
            if text.starts_with("http://") && !is_loopback_host(host) {
                self.error(span, format!("osv URL \"{text}\" is plain http to another host: use https://"));
                return None;
            }
            OsvSource::Url(text.to_string())
        } else {
            let path = self.path(text);
            let is_tar = [".tar.gz", ".tgz", ".zip"].iter().any(|ext| text.ends_with(ext));
            if self.secrets == Secrets::Resolve {
                match std::fs::metadata(&path) {
                    Err(e) => {
                        self.error(
                            span,
                            format!("osv {}: {e}: give the OSV mirror's directory or .tar.gz", path.display()),
                        );
                        return None;
                    }
                    Ok(meta) if is_tar && !meta.is_file() => {
                        self.error(span, format!("osv {} is not a file (an archive was named)", path.display()));
                        return None;
                    }
                    Ok(meta) if !is_tar && !meta.is_dir() => {
                        let hint = "give a directory of OSV records, or a file ending in .tar.gz or .zip";
                        self.error(span, format!("osv {} is not a directory: {hint}", path.display()));
                        return None;
                    }
                    Ok(_) => {}
                }
            }
            if is_tar { OsvSource::Archive(path) } else { OsvSource::Dir(path) }
        };
        let refresh = match &raw.refresh {
            None => DEFAULT_REFRESH,
            Some(value) => {
                let refresh = self.duration(value, "refresh")?;
                if refresh < MIN_REFRESH {
                    self.error(value.span(), format!("refresh {} is under the minimum of 1m", value.get_ref().trim()));
                    return None;
                }
                if !matches!(osv, OsvSource::Url(_)) {
                    self.error(
                        value.span(),
                        "refresh applies to an osv URL only: a local mirror is read at start (and on SIGHUP)",
                    );
                    return None;
                }
                refresh
            }
        };
        let mut releases = Vec::new();
        for text in &raw.releases {
            let version = text.get_ref().trim();
            match release_of(Some("ubuntu"), Some(version), None) {
                Some(release) => releases.push(release),
                None => {
                    self.error(
                        text.span(),
                        format!("release \"{version}\" is not an Ubuntu release: write its version, as \"22.04\""),
                    );
                    return None;
                }
            }
        }
        releases.sort();
        releases.dedup();
        Some(VulnerabilitySettings { osv, refresh, releases })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUILDER: &str = "[[builders]]\nname = \"b\"\nimage = \"r.example/b:1\"\n\n";

    fn parse(table: &str) -> Result<Config, String> {
        let text = format!("{BUILDER}[vulnerabilities]\n{table}");
        Config::parse_in(Path::new("/etc/bm/config.toml"), &text, Secrets::Skip, None).map_err(|e| e.to_string())
    }

    #[test]
    fn each_source_kind_and_the_refresh_default() {
        let v = parse("osv = \"mirror\"\n").unwrap().vulnerabilities.unwrap();
        let wanted = VulnerabilitySettings {
            osv: OsvSource::Dir("/etc/bm/mirror".into()),
            refresh: DEFAULT_REFRESH,
            releases: Vec::new(),
        };
        assert_eq!(v, wanted);
        let v = parse("osv = \"/m/ubuntu.tar.gz\"\n").unwrap().vulnerabilities.unwrap();
        assert_eq!(v.osv, OsvSource::Archive("/m/ubuntu.tar.gz".into()));
        let v = parse("osv = \"https://m.example/osv.tar.gz\"\nrefresh = \"1m\"\n").unwrap().vulnerabilities.unwrap();
        assert_eq!(
            v,
            VulnerabilitySettings {
                osv: OsvSource::Url("https://m.example/osv.tar.gz".into()),
                refresh: MIN_REFRESH,
                releases: Vec::new()
            }
        );
        let v =
            parse("osv = \"mirror\"\nreleases = [\"24.04\", \"22.04\", \"22.04\"]\n").unwrap().vulnerabilities.unwrap();
        let names: Vec<&str> = v.releases.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(names, ["Ubuntu:22.04:LTS", "Ubuntu:24.04:LTS"]);
        assert!(parse("osv = \"http://127.0.0.1:8080/osv.tar.gz\"\n").is_ok());
        assert!(
            Config::parse_in(Path::new("/c.toml"), BUILDER, Secrets::Skip, None).unwrap().vulnerabilities.is_none()
        );
    }

    #[test]
    fn mistakes_are_named_at_their_line_and_column() {
        let cases = [
            ("osv = \"\"\n", "6:7: osv is empty"),
            ("osv = \"http://m.example/osv.tar.gz\"\n", "6:7: osv URL \"http://m.example/osv.tar.gz\" is plain http"),
            (
                "osv = \"https://m.example/a.tar.gz\"\nrefresh = \"30s\"\n",
                "7:11: refresh 30s is under the minimum of 1m",
            ),
            ("osv = \"mirror\"\nrefresh = \"1h\"\n", "7:11: refresh applies to an osv URL only"),
            (
                "osv = \"https://m.example/a.tar.gz\"\nrefresh = \"6\"\n",
                "7:11: invalid refresh \"6\" (a unit is required",
            ),
            ("osv = \"mirror\"\nzzz = 1\n", "7:1: unknown field `zzz`, expected one of `osv`, `refresh`, `releases`"),
            ("osv = \"mirror\"\nreleases = [\"jammy\"]\n", "7:13: release \"jammy\" is not an Ubuntu release"),
        ];
        for (table, wanted) in cases {
            let error = parse(table).unwrap_err();
            assert!(error.contains(&format!("/etc/bm/config.toml:{wanted}")), "{table}: {error}");
        }
    }

    #[test]
    fn a_local_mirror_that_is_not_there_is_an_error_when_files_are_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.toml");
        let text = format!("{BUILDER}[vulnerabilities]\nosv = \"missing.tar.gz\"\n");
        let error = Config::parse_in(&config, &text, Secrets::Resolve, None).unwrap_err().to_string();
        assert!(error.contains(&format!("osv {}: ", dir.path().join("missing.tar.gz").display())), "{error}");
        assert!(Config::parse_in(&config, &text, Secrets::Skip, None).is_ok(), "status and plan need no mirror");
    }
}

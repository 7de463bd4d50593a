//! `[vulnerabilities]`: where the operator's mirror of Ubuntu's OSV records is (a directory, a
//! `.tar.gz`, or an `http(s)://` archive the daemon downloads and refreshes) and how often a
//! downloaded one is asked for again. A local mirror that is not there is an error when the
//! config's files are resolved (`run`, `check`), naming the path.

use std::path::PathBuf;
use std::time::Duration;

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
    /// A gzip-compressed tar of such a tree.
    TarGz(PathBuf),
    /// A `.tar.gz` downloaded (conditionally) every `refresh`, kept under the state directory.
    Url(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VulnerabilitySettings {
    pub osv: OsvSource,
    /// For a URL only: how often it is asked for again.
    pub refresh: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVulnerabilities {
    osv: Spanned<String>,
    refresh: Option<Spanned<DurationText>>,
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
        } else if text.ends_with(".zip") {
            self.error(span, "osv: a .zip mirror is not read: unpack it to a directory, or give a .tar.gz");
            return None;
        } else {
            let path = self.path(text);
            let is_tar = text.ends_with(".tar.gz") || text.ends_with(".tgz");
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
                        self.error(span, format!("osv {} is not a file (a .tar.gz was named)", path.display()));
                        return None;
                    }
                    Ok(meta) if !is_tar && !meta.is_dir() => {
                        let hint = "give a directory of OSV records, or a file ending in .tar.gz";
                        self.error(span, format!("osv {} is not a directory: {hint}", path.display()));
                        return None;
                    }
                    Ok(_) => {}
                }
            }
            if is_tar { OsvSource::TarGz(path) } else { OsvSource::Dir(path) }
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
        Some(VulnerabilitySettings { osv, refresh })
    }
}

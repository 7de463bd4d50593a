//! `[[builders]]`: the builder watches, their schedules and platforms, and the run image a pin
//! names (`run_image_watch`).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use builder_monitor_core::cnb::PinnedMetadata;
use builder_monitor_core::reference::{ImageRef, ReferenceError};
use builder_monitor_core::schedule::Schedule;

use super::*;

#[derive(Debug, Clone)]
pub struct BuilderSettings {
    /// Unique name; also names Kubernetes objects, so DNS-safe.
    pub name: String,
    pub image: ImageRef,
    pub schedule: Schedule,
    pub jitter: Duration,
    /// `None`: every platform of the index.
    pub platforms: Option<Vec<Platform>>,
    /// A new digest is reported only once it has been seen continuously for this long.
    pub settle: Option<Duration>,
    /// Also watch the run image the builder's metadata names.
    pub watch_run_image: bool,
}

/// The run image a builder watches given the metadata of its pin: the run image its preferred
/// platform names, by tag. None when the builder does not watch its run image, the metadata names
/// none, or names it by digest (nothing to watch); an error when the name is not a reference.
pub fn run_image_watch(
    builder: &BuilderSettings,
    metadata: Option<&PinnedMetadata>,
) -> Result<Option<ImageRef>, (String, ReferenceError)> {
    run_image_watch_named(builder, metadata.and_then(|m| m.preferred()?.run_image()))
}

/// [`run_image_watch`] given the run image name the metadata holds (the ledger keeps it apart).
pub fn run_image_watch_named(
    builder: &BuilderSettings,
    name: Option<&str>,
) -> Result<Option<ImageRef>, (String, ReferenceError)> {
    let Some(name) = name.filter(|_| builder.watch_run_image) else {
        return Ok(None);
    };
    match ImageRef::parse(name) {
        Ok(image) if image.digest().is_none() => Ok(Some(image)),
        Ok(_) => Ok(None),
        Err(err) => Err((name.to_string(), err)),
    }
}

/// `os/arch[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    pub fn parse(text: &str) -> Option<Self> {
        let parts: Vec<&str> = text.split('/').collect();
        let valid =
            |p: &&str| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !(2..=3).contains(&parts.len()) || !parts.iter().all(valid) {
            return None;
        }
        Some(Self {
            os: parts[0].to_string(),
            architecture: parts[1].to_string(),
            variant: parts.get(2).map(|v| v.to_string()),
        })
    }
}

impl Platform {
    /// Whether `other` (an index entry) is selected by this filter entry; no variant means any variant.
    pub fn matches(&self, other: &Platform) -> bool {
        self.os == other.os
            && self.architecture == other.architecture
            && (self.variant.is_none() || self.variant == other.variant)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBuilder {
    name: Spanned<String>,
    image: Spanned<String>,
    interval: Option<Spanned<DurationText>>,
    schedule: Option<Spanned<String>>,
    jitter: Option<Spanned<DurationText>>,
    platforms: Option<Vec<Spanned<String>>>,
    settle: Option<Spanned<DurationText>>,
    watch_run_image: Option<bool>,
}

impl<'a> Validator<'a> {
    pub(super) fn builders(
        &mut self,
        elements: Elements<'a>,
        monitor: Option<&MonitorSettings>,
    ) -> Result<Option<Vec<BuilderSettings>>, NotAlone> {
        let mut names = Names::default();
        let mut out = Vec::new();
        let ok = self.each_element(elements, "builders", |v, raw: RawBuilder| {
            let unique = v.unique_name(&mut names, &raw.name, "builder");
            match v.builder(raw, monitor) {
                Some(b) => out.push(b),
                None => return false,
            }
            unique
        })?;
        // Kept for the daemon's life: no room for growth (a third of the Vec at 10,000 builders).
        out.shrink_to_fit();
        Ok(ok.then_some(out))
    }

    pub(super) fn builder(&mut self, raw: RawBuilder, monitor: Option<&MonitorSettings>) -> Option<BuilderSettings> {
        let errors_before = self.diagnostics.len();
        let name = raw.name.get_ref().clone();
        if !is_dns_label(&name) {
            self.error(
                raw.name.span(),
                format!(
                    "invalid builder name \"{name}\": use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit (it names Kubernetes objects)"
                ),
            );
        }
        let image = match ImageRef::parse(raw.image.get_ref()) {
            Ok(image) if image.digest().is_some() => {
                self.error(
                    raw.image.span(),
                    format!(
                        "image \"{}\" is pinned by digest, so there is nothing to watch; name a tag (e.g. \"{}\")",
                        raw.image.get_ref(),
                        image.with_tag_only()
                    ),
                );
                None
            }
            Ok(image) => Some(image),
            Err(err) => {
                self.error(raw.image.span(), format!("invalid image reference \"{}\": {err}", raw.image.get_ref()));
                None
            }
        };
        let schedule = match (&raw.interval, &raw.schedule) {
            (Some(_), Some(s)) => {
                self.error(s.span(), "set either interval or schedule, not both");
                None
            }
            (Some(i), None) => self.positive_duration(i, "interval").map(Schedule::Interval),
            (None, Some(s)) => match Schedule::cron(s.get_ref()) {
                Ok(schedule) => Some(schedule),
                Err(err) => {
                    self.error(s.span(), err.to_string());
                    None
                }
            },
            (None, None) => monitor.map(|m| Schedule::Interval(m.interval)),
        };
        let jitter = match &raw.jitter {
            Some(j) => self.duration(j, "jitter"),
            None => monitor.map(|m| m.jitter),
        };
        let settle = match &raw.settle {
            Some(s) => self.positive_duration(s, "settle").map(Some),
            None => Some(None),
        };
        let platforms = match &raw.platforms {
            None => Some(None),
            Some(list) if list.is_empty() => {
                self.error(raw.name.span(), "platforms is empty; omit it to watch every platform");
                None
            }
            Some(list) => {
                let mut out: Vec<Platform> = Vec::new();
                for p in list {
                    match Platform::parse(p.get_ref()) {
                        Some(platform) if out.contains(&platform) => {
                            self.error(p.span(), format!("platform \"{platform}\" is listed twice"));
                        }
                        Some(platform) => out.push(platform),
                        None => self.error(
                            p.span(),
                            format!(
                                "invalid platform \"{}\" (expected os/arch or os/arch/variant, e.g. \"linux/amd64\")",
                                p.get_ref()
                            ),
                        ),
                    }
                }
                Some(Some(out))
            }
        };
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(BuilderSettings {
            name,
            image: image?,
            schedule: schedule?,
            jitter: jitter?,
            platforms: platforms?,
            settle: settle?,
            watch_run_image: raw.watch_run_image.unwrap_or(true),
        })
    }
}

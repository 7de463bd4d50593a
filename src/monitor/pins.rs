//! Each steady watch's pin, kept in memory so that an unchanged check (the tag's `HEAD` names the
//! pin) neither reads the ledger nor decodes anything: it compares the digest here and leaves its
//! time with the ledger's batched touches (`check`). Loaded at the start of each term from one read
//! of every entry ([`Checks::pins`](crate::ledger::Checks::pins)) and written through after every
//! check's commit. A watch that is not steady — never pinned, failing, holding a digest back, or
//! whose commit failed — has no entry, and its checks read the ledger as before.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};

use super::Watch;
use crate::ledger::{PinSummary, WatchKind};

/// The steady pins, by watch name.
#[derive(Default)]
pub(super) struct Pins {
    steady: Mutex<HashMap<String, Steady>>,
}

struct Steady {
    kind: WatchKind,
    /// The image the pin is of: a watch whose configured image changed starts over.
    image: Arc<str>,
    digest: Box<str>,
}

impl Pins {
    /// Replaces every entry with the ledger's steady pins.
    pub(super) fn load(&self, summaries: &[PinSummary]) {
        let steady = summaries
            .iter()
            .filter(|s| s.steady)
            .filter_map(|s| {
                let digest = s.digest.as_deref()?;
                Some((s.name.clone(), Steady { kind: s.kind, image: s.image.as_str().into(), digest: digest.into() }))
            })
            .collect();
        *self.steady.lock().unwrap_or_else(|e| e.into_inner()) = steady;
    }

    /// The image string of `watch`'s steady pin when that pin is `digest`: the check found nothing
    /// new and only its time is to be kept.
    pub(super) fn unchanged(&self, watch: &Watch, digest: &str) -> Option<Arc<str>> {
        let steady = self.steady.lock().unwrap_or_else(|e| e.into_inner());
        let entry = steady.get(&watch.name)?;
        (entry.kind == watch.kind && &*entry.digest == digest && displays_as(&watch.image, &entry.image))
            .then(|| entry.image.clone())
    }

    /// After a check's commit: `digest` is the watch's pin and its entry is steady, or (`None`) it
    /// is not, or the commit failed.
    pub(super) fn committed(&self, watch: &Watch, image: &str, digest: Option<&str>) {
        let mut steady = self.steady.lock().unwrap_or_else(|e| e.into_inner());
        match digest {
            Some(digest) => {
                let entry = Steady { kind: watch.kind, image: image.into(), digest: digest.into() };
                steady.insert(watch.name.clone(), entry);
            }
            None => {
                steady.remove(&watch.name);
            }
        }
    }
}

/// Whether `value` displays as exactly `text`, without building the string: every check compares
/// its image this way, and start-up every builder's.
pub(super) fn displays_as(value: &impl fmt::Display, text: &str) -> bool {
    struct Rest<'a>(&'a str);
    impl fmt::Write for Rest<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 = self.0.strip_prefix(s).ok_or(fmt::Error)?;
            Ok(())
        }
    }
    let mut rest = Rest(text);
    write!(rest, "{value}").is_ok() && rest.0.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use builder_monitor_core::reference::ImageRef;

    fn watch(image: &str) -> Watch {
        let image = ImageRef::parse(image).unwrap();
        Watch {
            name: "b".into(),
            kind: WatchKind::Builder,
            image,
            schedule: builder_monitor_core::schedule::Schedule::Interval(std::time::Duration::from_secs(300)),
            jitter: Default::default(),
            platforms: None,
            settle: None,
        }
    }

    fn summary(steady: bool, digest: Option<&str>) -> PinSummary {
        PinSummary {
            name: "b".into(),
            kind: WatchKind::Builder,
            image: "reg.test/b:1".into(),
            digest: digest.map(str::to_string),
            steady,
            run_image: None,
        }
    }

    #[test]
    fn only_a_steady_pin_of_the_same_image_and_digest_is_unchanged() {
        let pins = Pins::default();
        let w = watch("reg.test/b:1");
        pins.load(&[summary(true, Some("sha256:a"))]);
        assert_eq!(pins.unchanged(&w, "sha256:a").as_deref(), Some("reg.test/b:1"));
        assert!(pins.unchanged(&w, "sha256:b").is_none(), "another digest is a move");
        assert!(pins.unchanged(&watch("reg.test/b:2"), "sha256:a").is_none(), "another image starts over");
        assert!(pins.unchanged(&watch("reg.test/b"), "sha256:a").is_none(), "a prefix of the image is another");
        let run = Watch { kind: WatchKind::RunImage, ..w.clone() };
        assert!(pins.unchanged(&run, "sha256:a").is_none());

        pins.load(&[summary(false, Some("sha256:a"))]);
        assert!(pins.unchanged(&w, "sha256:a").is_none(), "a failing or held entry reads the ledger");
        pins.load(&[summary(true, None)]);
        assert!(pins.unchanged(&w, "sha256:a").is_none(), "no pin yet");
    }

    #[test]
    fn a_commit_writes_through_and_a_failed_one_forgets() {
        let pins = Pins::default();
        let w = watch("reg.test/b:1");
        pins.committed(&w, "reg.test/b:1", Some("sha256:a"));
        assert!(pins.unchanged(&w, "sha256:a").is_some());
        pins.committed(&w, "reg.test/b:1", Some("sha256:b"));
        assert!(pins.unchanged(&w, "sha256:a").is_none());
        assert!(pins.unchanged(&w, "sha256:b").is_some());
        pins.committed(&w, "reg.test/b:1", None);
        assert!(pins.unchanged(&w, "sha256:b").is_none());
    }

    #[test]
    fn displays_as_compares_whole_text() {
        let image = ImageRef::parse("reg.test/a/b:1").unwrap();
        assert!(displays_as(&image, "reg.test/a/b:1"));
        assert!(!displays_as(&image, "reg.test/a/b:10"));
        assert!(!displays_as(&image, "reg.test/a/b:"));
        assert!(!displays_as(&image, ""));
    }
}

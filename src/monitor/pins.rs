//! Each steady watch's pin, kept in memory so that an unchanged check (the tag's `HEAD` names the
//! pin) neither reads the ledger nor decodes anything: it compares the digest here and leaves its
//! time with the ledger's batched touches (`check`). Loaded at the start of each term from one read
//! of every entry ([`Checks::pins`](crate::ledger::Checks::pins)) and written through after every
//! check's commit. A watch that is not steady — never pinned, failing, holding a digest back, or
//! whose commit failed — has no entry, and its checks read the ledger as before. So has a pin
//! that is not a `sha256:` digest as registries write them.
//!
//! An entry is 64 bytes and its name's string, one a watch for the daemon's life: the digest as
//! its 32 bytes, and the image it is of as a hash of its text; the touch of an unchanged check
//! gets the watch's own image string, shared ([`ImageRef::shared`]).

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::{Arc, Mutex};

use super::Watch;
use crate::ledger::{PinSummary, WatchKind};
use builder_monitor_core::reference::{ImageRef, Sha256Digest};

/// The steady pins, by watch name.
#[derive(Default)]
pub(super) struct Pins {
    steady: Mutex<HashMap<Box<str>, Steady>>,
}

struct Steady {
    kind: WatchKind,
    digest: Sha256Digest,
    /// The image the pin is of, as [`image_key`]: a watch whose configured image changed starts
    /// over.
    image: u64,
}

/// A hash of an image's text (SipHash with fixed keys: no random state to keep). Two images with
/// one key would be taken for one: a 2⁻⁶⁴ chance, and only for a watch whose configured image
/// changed since its pin.
fn image_key(text: &str) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(text)
}

impl Pins {
    /// Replaces every entry with the ledger's steady pins.
    pub(super) fn load(&self, summaries: &[PinSummary]) {
        let steady = summaries
            .iter()
            .filter(|s| s.steady)
            .filter_map(|s| {
                let digest = Sha256Digest::parse(s.digest.as_deref()?)?;
                Some((s.name.as_str().into(), Steady { kind: s.kind, digest, image: image_key(&s.image) }))
            })
            .collect();
        *self.steady.lock().unwrap_or_else(|e| e.into_inner()) = steady;
    }

    /// The image string of `watch`'s steady pin when that pin is `digest`: the check found nothing
    /// new and only its time is to be kept.
    pub(super) fn unchanged(&self, watch: &Watch, digest: &str) -> Option<Arc<str>> {
        let key = image_key(watch.image.as_str());
        let steady = self.steady.lock().unwrap_or_else(|e| e.into_inner());
        let entry = steady.get(watch.name.as_str())?;
        (entry.kind == watch.kind && entry.digest.is(digest) && entry.image == key).then(|| watch.image.shared())
    }

    /// After a check's commit: `digest` is the watch's pin of `image` and its entry is steady, or
    /// (`None`) it is not, or the commit failed.
    pub(super) fn committed(&self, watch: &Watch, image: &str, digest: Option<&str>) {
        let mut steady = self.steady.lock().unwrap_or_else(|e| e.into_inner());
        match digest.and_then(Sha256Digest::parse) {
            Some(digest) => {
                let entry = Steady { kind: watch.kind, digest, image: image_key(image) };
                match steady.get_mut(watch.name.as_str()) {
                    Some(old) => *old = entry,
                    None => {
                        steady.insert(watch.name.as_str().into(), entry);
                    }
                }
            }
            None => {
                steady.remove(watch.name.as_str());
            }
        }
    }
}

/// Whether `image` displays as exactly `text`.
pub(super) fn displays_as(image: &ImageRef, text: &str) -> bool {
    image.as_str() == text
}

#[cfg(test)]
mod tests {
    use super::*;

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

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

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
        pins.load(&[summary(true, Some(A))]);
        assert_eq!(pins.unchanged(&w, A).as_deref(), Some("reg.test/b:1"));
        assert!(pins.unchanged(&w, B).is_none(), "another digest is a move");
        assert!(pins.unchanged(&watch("reg.test/b:2"), A).is_none(), "another image starts over");
        assert!(pins.unchanged(&watch("reg.test/b"), A).is_none(), "a prefix of the image is another");
        let run = Watch { kind: WatchKind::RunImage, ..w.clone() };
        assert!(pins.unchanged(&run, A).is_none());

        pins.load(&[summary(false, Some(A))]);
        assert!(pins.unchanged(&w, A).is_none(), "a failing or held entry reads the ledger");
        pins.load(&[summary(true, None)]);
        assert!(pins.unchanged(&w, A).is_none(), "no pin yet");
    }

    #[test]
    fn a_commit_writes_through_and_a_failed_one_forgets() {
        let pins = Pins::default();
        let w = watch("reg.test/b:1");
        pins.committed(&w, "reg.test/b:1", Some(A));
        assert!(pins.unchanged(&w, A).is_some());
        pins.committed(&w, "reg.test/b:1", Some(B));
        assert!(pins.unchanged(&w, A).is_none());
        assert!(pins.unchanged(&w, B).is_some());
        pins.committed(&w, "reg.test/b:1", None);
        assert!(pins.unchanged(&w, B).is_none());
    }

    #[test]
    fn a_pin_that_is_no_sha256_digest_is_not_kept_so_its_checks_read_the_ledger() {
        let pins = Pins::default();
        let w = watch("reg.test/b:1");
        let sha512 = format!("sha512:{}", "a".repeat(128));
        pins.load(&[summary(true, Some(&sha512))]);
        assert!(pins.unchanged(&w, &sha512).is_none());
        pins.committed(&w, "reg.test/b:1", Some(A));
        pins.committed(&w, "reg.test/b:1", Some(&A.to_uppercase()));
        assert!(pins.unchanged(&w, A).is_none(), "the old pin is forgotten");
        assert!(pins.unchanged(&w, &A.to_uppercase()).is_none());
    }

    #[test]
    fn a_commit_of_another_image_replaces_the_entrys_image() {
        let pins = Pins::default();
        let (one, two) = (watch("reg.test/b:1"), watch("reg.test/b:2"));
        pins.committed(&one, "reg.test/b:1", Some(A));
        pins.committed(&two, "reg.test/b:2", Some(A));
        assert!(pins.unchanged(&one, A).is_none());
        assert_eq!(pins.unchanged(&two, A).as_deref(), Some("reg.test/b:2"));
    }

    #[test]
    fn an_unchanged_check_touches_with_the_watchs_own_image_string() {
        let pins = Pins::default();
        let w = watch("reg.test/b:1");
        pins.load(&[summary(true, Some(A))]);
        let image = pins.unchanged(&w, A).unwrap();
        assert!(Arc::ptr_eq(&image, &w.image.shared()), "shared, not copied");
        assert_eq!(std::mem::size_of::<(Box<str>, Steady)>(), 64);
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

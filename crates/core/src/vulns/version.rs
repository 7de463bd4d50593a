//! Debian's version order (`deb-version(7)`): `[epoch:]upstream[-revision]`, a missing epoch is 0,
//! `~` sorts before anything (even the end), letters before non-letters, digit runs numerically.
//! `dpkg --compare-versions` is the reference.

use std::cmp::Ordering;

/// `a` against `b` in Debian's order.
pub fn compare(a: &str, b: &str) -> Ordering {
    let _ = (a, b);
    unimplemented!("issue 43: core")
}

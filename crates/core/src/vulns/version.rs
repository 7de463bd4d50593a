//! Debian's version order (`deb-version(7)`): `[epoch:]upstream[-revision]`, a missing epoch is 0,
//! `~` sorts before anything (even the end), letters before non-letters, digit runs numerically.
//! `dpkg --compare-versions` is the reference, and this is dpkg's own algorithm (`parseversion`
//! and `verrevcmp` of dpkg 1.21), step for step: the epoch is what `strtol` reads before the
//! first colon, the revision what follows the last hyphen, and digit runs compare by value at any
//! length (leading zeros dropped, then length, then digits: no overflow).
//!
//! Written here rather than taken from the `debversion` crate (0.5.5), which was tried on the
//! dpkg table of `tests/cli/dpkg_versions.rs`: it disagrees with dpkg on 4 of its 620 pairs (a
//! missing digit run against a run of zeros: dpkg has `1.0a` = `1.0a0`, it has `1.0a` <
//! `1.0a0`), refuses what dpkg only warns about (`1_0`), and would add five crates the workspace
//! does not build (itself, `lazy-regex` and its proc-macro, `num-bigint`, `num-integer`: 41 s of
//! a cold build on 2 cores) for ~60 lines.
//!
//! **Invalid versions.** A string dpkg refuses with an error (empty or blanks only, blanks inside,
//! an epoch that is not a number or is negative or above `i32::MAX`, nothing after the epoch's
//! colon, an empty upstream part or an empty revision after a trailing hyphen) is *invalid*
//! ([`is_valid`]). [`compare`] never panics on one: every invalid version sorts before every
//! valid one (even `~`), and invalid ones among themselves by their bytes, so the order stays
//! total. Callers that decide something from a version (the index) check [`is_valid`] first and
//! never let an invalid one prove a fix. What dpkg only warns about (no leading digit, characters
//! outside `[A-Za-z0-9.+~:-]`) compares as dpkg compares it.

use std::cmp::Ordering;

/// The parts of a valid version.
struct Parsed<'a> {
    epoch: u32,
    upstream: &'a [u8],
    revision: &'a [u8],
}

/// dpkg's blanks (`c_isblank`): trimmed at both ends, refused inside.
fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// dpkg's `parseversion`, errors only (its warnings still compare).
fn parse(text: &str) -> Option<Parsed<'_>> {
    let text = text.trim_matches(is_blank);
    if text.is_empty() || text.contains(is_blank) {
        return None;
    }
    let (epoch, rest) = match text.split_once(':') {
        Some((epoch, rest)) => (parse_epoch(epoch)?, rest),
        None => (0, text),
    };
    if rest.is_empty() {
        return None;
    }
    let (upstream, revision) = match rest.rsplit_once('-') {
        Some((_, "")) => return None,
        Some((upstream, revision)) => (upstream, revision),
        None => (rest, ""),
    };
    if upstream.is_empty() {
        return None;
    }
    Some(Parsed { epoch, upstream: upstream.as_bytes(), revision: revision.as_bytes() })
}

/// The epoch as C's `strtol` reads it (leading white space, a sign, digits) where dpkg accepts it:
/// all of the text before the colon consumed, not negative, at most `INT_MAX`.
fn parse_epoch(text: &str) -> Option<u32> {
    let text = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let significant = digits.trim_start_matches('0');
    if significant.len() > 10 {
        return None;
    }
    let value: u64 = if significant.is_empty() { 0 } else { significant.parse().ok()? };
    if value > i32::MAX as u64 || (negative && value != 0) {
        return None;
    }
    u32::try_from(value).ok()
}

/// Whether dpkg accepts `text` as a version (see the module doc for what is refused).
pub fn is_valid(text: &str) -> bool {
    parse(text).is_some()
}

/// `a` against `b` in Debian's order; an invalid version sorts before every valid one.
pub fn compare(a: &str, b: &str) -> Ordering {
    match (parse(a), parse(b)) {
        (Some(a), Some(b)) => a
            .epoch
            .cmp(&b.epoch)
            .then_with(|| verrevcmp(a.upstream, b.upstream))
            .then_with(|| verrevcmp(a.revision, b.revision)),
        (None, None) => a.as_bytes().cmp(b.as_bytes()),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
    }
}

/// dpkg's `order`: digits 0 (never reached), letters their code, `~` -1, the end 0, anything
/// else its code plus 256. dpkg reads a signed `char`, so a byte above 127 is its code minus 256
/// before the 256 is added: that is the byte's value.
fn order(byte: Option<u8>) -> i32 {
    match byte {
        None => 0,
        Some(b'~') => -1,
        Some(b) if b.is_ascii_digit() => 0,
        Some(b) if b.is_ascii_alphabetic() => i32::from(b),
        Some(b) => i32::from(b as i8) + 256,
    }
}

/// dpkg's `verrevcmp`: alternating non-digit runs (by [`order`]) and digit runs (by value).
fn verrevcmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut i, mut j) = (0, 0);
    let is_digit = |s: &[u8], k: usize| s.get(k).is_some_and(u8::is_ascii_digit);
    while i < a.len() || j < b.len() {
        while (i < a.len() && !is_digit(a, i)) || (j < b.len() && !is_digit(b, j)) {
            let (x, y) = (order(a.get(i).copied()), order(b.get(j).copied()));
            if x != y {
                return x.cmp(&y);
            }
            i += 1;
            j += 1;
        }
        while a.get(i) == Some(&b'0') {
            i += 1;
        }
        while b.get(j) == Some(&b'0') {
            j += 1;
        }
        let mut first_diff = Ordering::Equal;
        while is_digit(a, i) && is_digit(b, j) {
            if first_diff == Ordering::Equal {
                first_diff = a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
        if is_digit(a, i) {
            return Ordering::Greater;
        }
        if is_digit(b, j) {
            return Ordering::Less;
        }
        if first_diff != Ordering::Equal {
            return first_diff;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering::{Equal, Greater, Less};

    use super::*;

    #[track_caller]
    fn check(a: &str, expected: Ordering, b: &str) {
        assert_eq!(compare(a, b), expected, "{a} against {b}");
        assert_eq!(compare(b, a), expected.reverse(), "{b} against {a}");
    }

    #[test]
    fn ubuntu_backports_sort_below_their_base() {
        check("7.81.0-1ubuntu1.16~22.04.1", Less, "7.81.0-1ubuntu1.16");
        check("7.81.0-1ubuntu1.15", Less, "7.81.0-1ubuntu1.16~22.04.1");
        check("3.0.2-0ubuntu1.18", Less, "3.0.2-0ubuntu1.19");
        check("3.0.2-0ubuntu1.9", Less, "3.0.2-0ubuntu1.10");
    }

    #[test]
    fn the_epoch_decides_first() {
        check("1:1.2.11", Greater, "1.2.13");
        check("0:1.2.13", Equal, "1.2.13");
        check("2:0", Greater, "1:99999");
        check("007:1", Equal, "7:1");
        // Only the first colon ends the epoch; later ones are part of the upstream version.
        check("1:2:3", Greater, "1:2");
        check("1:2:3", Less, "1:2:4");
    }

    #[test]
    fn tilde_sorts_before_anything_even_the_end() {
        check("1.0~rc1", Less, "1.0");
        check("1.0~~", Less, "1.0~");
        check("1.0~~a", Less, "1.0~");
        check("1.0~", Less, "1.0");
        check("1.0~", Greater, "1.0~~");
        check("1.0", Less, "1.0a");
        check("1.0a", Less, "1.0+");
        check("1.0+", Less, "1.0.");
        check("1.0-1~", Less, "1.0-1");
    }

    #[test]
    fn letters_sort_before_other_characters() {
        check("1.0a", Less, "1.0+a");
        check("1.0Z", Less, "1.0a");
        check("1.0z", Less, "1.0.");
        check("1a", Less, "1+");
    }

    #[test]
    fn digit_runs_compare_by_value_at_any_length() {
        check("1.010", Equal, "1.10");
        check("1.9", Less, "1.10");
        check("0001", Equal, "1");
        let huge = "123456789012345678901234567890";
        check(huge, Less, "123456789012345678901234567891");
        check(huge, Greater, "99999999999999999999999999999");
        check(&format!("1.{huge}0"), Greater, &format!("1.{huge}"));
    }

    #[test]
    fn the_revision_starts_after_the_last_hyphen() {
        check("1.0-2-1", Greater, "1.0-1-2");
        check("1.0-2-1", Less, "1.0-10-1");
        check("1.0", Equal, "1.0-0");
        // A missing digit run is a run of zeros (where the `debversion` crate differs).
        check("1.0a", Equal, "1.0a0");
        check("1.0~", Equal, "1.0~0");
        check("1.0-1", Greater, "1.0");
    }

    #[test]
    fn invalid_versions_sort_first_and_never_panic() {
        for bad in ["", "   ", "a b", "x:1.0", "-1:1.0", "99999999999:1", "1:", "1.0-", "-1", "1:-1", ":1"] {
            assert!(!is_valid(bad), "{bad:?} taken as valid");
            check(bad, Less, "~");
            check(bad, Less, "0");
            check(bad, Equal, bad);
        }
        check("", Less, "x:1");
        for good in ["1.0", " 1.0 ", "+1:1.0", "-0:1.0", "2147483647:1", "a1", "1_0", "1:2:3", "~"] {
            assert!(is_valid(good), "{good:?} taken as invalid");
        }
        assert!(!is_valid("2147483648:1"));
    }
}

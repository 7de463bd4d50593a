//! The Debian version order the vulnerability matching uses agrees with dpkg itself: every pair of
//! a generated table (epochs, tildes, `+`, `.`, letters, digit runs with leading zeros and beyond
//! 64 bits, hyphens in the upstream part, real Ubuntu versions) is put to `dpkg
//! --compare-versions`, and what dpkg refuses as bad syntax is what `is_valid` refuses.

use std::cmp::Ordering;
use std::process::Command;

use builder_monitor_core::vulns::version::{compare, is_valid};

/// dpkg's answer for `a` against `b`: `None` when it refused either (exit 2, bad syntax).
fn dpkg(a: &str, b: &str) -> Option<Ordering> {
    let holds = |relation: &str| {
        let status = Command::new("dpkg")
            .args(["--compare-versions", a, relation, b])
            .stderr(std::process::Stdio::null())
            .status()
            .expect("dpkg runs (it is on every Debian machine)");
        match status.code() {
            Some(0) => Some(true),
            Some(1) => Some(false),
            _ => None,
        }
    };
    if holds("lt")? {
        Some(Ordering::Less)
    } else if holds("eq")? {
        Some(Ordering::Equal)
    } else {
        Some(Ordering::Greater)
    }
}

/// A fixed-seed generator, so a failing pair is the same on every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % below
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.next(from.len())]
    }
}

const EPOCHS: &[&str] = &["", "", "", "0:", "1:", "2:", "10:", "007:"];
const UPSTREAMS: &[&str] = &[
    "1.0",
    "1.00",
    "1.0.1",
    "1.0~rc1",
    "1.0~~",
    "1.0~",
    "1.0~~a",
    "1.0a",
    "1.0A",
    "1.0z",
    "1.0a~",
    "1.0+dfsg",
    "1.0+b1",
    "1.0.",
    "1.0+",
    "1.2.11",
    "1.2.13",
    "1.2.11.dfsg",
    "7.81.0",
    "0001.0",
    "1.010",
    "2.0.0~beta1",
    "3.0.2",
    "0",
    "12345678901234567890123",
    "12345678901234567890124",
    "99999999999999999999999999",
    "1.0+git20240101",
    "2:3",
];
const REVISIONS: &[&str] = &[
    "",
    "",
    "-1",
    "-0",
    "-1ubuntu1",
    "-1ubuntu1.16",
    "-1ubuntu1.16~22.04.1",
    "-0ubuntu1.18",
    "-2-1",
    "-1~",
    "-1+b1",
    "-1.0a",
    "-rc1-1",
];
/// Small edits that make near pairs, where orders are decided.
const SUFFIXES: &[&str] = &["~", "~~", "a", "+", ".", ".0", "0", "1", "~1", "+b1", "Z"];

fn version(rng: &mut Lcg) -> String {
    format!("{}{}{}", rng.pick(EPOCHS), rng.pick(UPSTREAMS), rng.pick(REVISIONS))
}

fn near(rng: &mut Lcg, version: &str) -> String {
    match rng.next(5) {
        0 => format!("{version}{}", rng.pick(SUFFIXES)),
        1 => match version.split_once(':') {
            Some((_, rest)) => rest.to_string(),
            None => format!("1:{version}"),
        },
        2 => version.replacen('.', &format!(".0{}", rng.next(10)), 1),
        3 => version.replacen('1', "01", 1),
        _ => match version.rsplit_once('-') {
            Some((upstream, _)) => format!("{upstream}{}", rng.pick(REVISIONS)),
            None => format!("{version}-{}", rng.next(3)),
        },
    }
}

/// The table: named cases, then near pairs and far pairs from a fixed seed.
fn table() -> Vec<(String, String)> {
    let named = [
        ("7.81.0-1ubuntu1.16~22.04.1", "7.81.0-1ubuntu1.16"),
        ("1:1.2.11", "1.2.13"),
        ("1:1.2.11.dfsg-2ubuntu9.2", "1.2.13.dfsg-1"),
        ("3.0.2-0ubuntu1.18", "3.0.2-0ubuntu1.19"),
        ("3.0.2-0ubuntu1.9", "3.0.2-0ubuntu1.10"),
        ("2.35-0ubuntu3.8", "2.35-0ubuntu3.10"),
        ("1.0~~", "1.0~"),
        ("1.0~", "1.0"),
        ("1.0~~a", "1.0~"),
        ("1.0", "1.0-0"),
        ("1.0-2-1", "1.0-10-1"),
        ("1.0a", "1.0a0"),
        ("1.0~~a", "1.0~~a0"),
        ("1:2:3", "1:2:4"),
        ("0001.0", "1.0"),
        ("1.010", "1.10"),
        ("18446744073709551616", "18446744073709551615"),
        ("1.18446744073709551617", "1.18446744073709551616"),
        ("1.0a", "1.0+"),
        ("1.0Z", "1.0a"),
        ("1.0+b1", "1.0.1"),
        ("20211016ubuntu0.22.04.1", "20230311ubuntu0.22.04.1"),
        ("1:9.18.28-0ubuntu0.22.04.1", "1:9.18.30-0ubuntu0.22.04.1"),
        ("5.1-6ubuntu1.1", "5.1-6ubuntu1"),
    ];
    let mut pairs: Vec<(String, String)> = named.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let mut rng = Lcg(43);
    while pairs.len() < 400 {
        let a = version(&mut rng);
        let b = near(&mut rng, &a);
        pairs.push((a, b));
    }
    while pairs.len() < 620 {
        pairs.push((version(&mut rng), version(&mut rng)));
    }
    pairs
}

#[test]
fn debian_version_order_agrees_with_dpkg_on_a_generated_table() {
    let pairs = table();
    assert!(pairs.len() >= 600);
    let mut disagree = Vec::new();
    let mut seen = [0usize; 3];
    for (a, b) in &pairs {
        let theirs = dpkg(a, b);
        let ours = compare(a, b);
        if theirs.is_some() {
            seen[(ours as i8 + 1) as usize] += 1;
        }
        if theirs != Some(ours) || !is_valid(a) || !is_valid(b) {
            disagree.push(format!("{a} against {b}: dpkg {theirs:?}, ours {ours:?}"));
        }
    }
    assert!(disagree.is_empty(), "{} of {} pairs disagree:\n{}", disagree.len(), pairs.len(), disagree.join("\n"));
    // The table exercises all three answers, not one.
    assert!(seen.iter().all(|n| *n >= 50), "lt/eq/gt counts {seen:?}");
}

#[test]
fn what_dpkg_refuses_as_bad_syntax_is_invalid_here() {
    // Warnings only (dpkg still compares): a leading non-digit, an odd character, `+` in an epoch.
    let warned = ["a1", "1_0", "~", "1.0-a_b", "+1:1.0", "1:a"];
    // Errors (dpkg exits 2). The empty string is left out: dpkg's command line reads it as "no
    // version", which `lt` puts before every version, as `compare` puts every invalid one.
    let refused = ["x:1.0", "1:", "1.0-", "1:-1", ":1", "1 0", "2147483648:1", "99999999999:1", "1a:1.0"];
    for text in warned.iter().chain(&refused) {
        let accepted = dpkg(text, "1.0").is_some();
        assert_eq!(is_valid(text), accepted, "{text:?}: dpkg accepts it: {accepted}");
    }
    for text in refused {
        assert_eq!(compare(text, "~"), Ordering::Less, "{text:?}");
    }
    assert_eq!(dpkg("", "~"), Some(Ordering::Less));
    assert_eq!(compare("", "~"), Ordering::Less);
}

//! Which pool builds an app: the decision, without I/O. A pool serves the platforms it lists (a
//! platform without a variant serves every variant of its os/arch; no list: every platform); an
//! image that names its pool builds only there; otherwise the pools serving every platform of the
//! app, in config order, the ones whose cluster answers first.

use serde::{Deserialize, Serialize};

/// What the choice needs to know of one pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolView<'a> {
    pub name: &'a str,
    /// `None`: every platform.
    pub platforms: Option<&'a [String]>,
    /// Whether its cluster answers (its circuit is closed).
    pub answers: bool,
}

/// What a build recorded of where it runs, before it created anything there (`progress` of its
/// action): a restart follows it in that pool, and `status` names the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildProgress {
    pub pool: String,
    /// Kueue holds its Job suspended: waiting for quota, not running.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
    /// The app's one platform, when its build pod was placed by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
}

/// Whether a pool with `platforms` builds `platform` (`os/arch[/variant]`).
pub fn serves(platforms: Option<&[String]>, platform: &str) -> bool {
    let Some(platforms) = platforms else { return true };
    platforms.iter().any(|p| p == platform || platform.strip_prefix(p.as_str()).is_some_and(|r| r.starts_with('/')))
}

/// Why no pool can build an app.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoPool {
    #[error("no pool builds {platforms} (pools: {pools})")]
    Platform { platforms: String, pools: String },
    #[error("pool \"{0}\" is not configured")]
    Unknown(String),
}

/// The pools to try for an app, in order: the one it names, or those serving all of
/// `app_platforms` (unknown: every pool), answering ones first. A pool that does not answer
/// stays in the list, last: when every pool serving the app is down, trying beats failing.
pub fn candidates<'a>(
    pools: &[PoolView<'a>],
    named: Option<&str>,
    app_platforms: Option<&[String]>,
) -> Result<Vec<&'a str>, NoPool> {
    if let Some(name) = named {
        return pools.iter().find(|p| p.name == name).map(|p| vec![p.name]).ok_or_else(|| NoPool::Unknown(name.into()));
    }
    let fits = |p: &PoolView<'_>| app_platforms.is_none_or(|wanted| wanted.iter().all(|w| serves(p.platforms, w)));
    let fitting: Vec<&PoolView<'a>> = pools.iter().filter(|p| fits(p)).collect();
    if fitting.is_empty() {
        let platforms = app_platforms.map(|p| p.join(" and ")).unwrap_or_default();
        let pools = pools
            .iter()
            .map(|p| {
                format!("{} [{}]", p.name, p.platforms.map(|l| l.join(", ")).unwrap_or_else(|| "every platform".into()))
            })
            .collect::<Vec<_>>()
            .join(", ");
        return Err(NoPool::Platform { platforms, pools });
    }
    let (up, down): (Vec<_>, Vec<_>) = fitting.into_iter().partition(|p| p.answers);
    Ok(up.into_iter().chain(down).map(|p| p.name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn variants_and_lists() {
        let arm = list(&["linux/arm64"]);
        assert!(serves(Some(&arm), "linux/arm64") && serves(Some(&arm), "linux/arm64/v8"));
        assert!(!serves(Some(&arm), "linux/arm64v8") && !serves(Some(&arm), "linux/amd64"));
        let v7 = list(&["linux/arm/v7"]);
        assert!(serves(Some(&v7), "linux/arm/v7") && !serves(Some(&v7), "linux/arm/v6"));
        assert!(serves(None, "windows/amd64"));
    }

    #[test]
    fn the_first_answering_pool_serving_every_platform() {
        let (amd, win, both) =
            (list(&["linux/amd64"]), list(&["windows/amd64"]), list(&["linux/amd64", "linux/arm64"]));
        let pools = |a_up| {
            vec![
                PoolView { name: "a", platforms: Some(&amd), answers: a_up },
                PoolView { name: "b", platforms: Some(&win), answers: true },
                PoolView { name: "c", platforms: Some(&both), answers: true },
            ]
        };
        let amd64 = list(&["linux/amd64"]);
        assert_eq!(candidates(&pools(true), None, Some(&amd64)).unwrap(), ["a", "c"]);
        // A pool whose cluster does not answer is passed over, and tried last.
        assert_eq!(candidates(&pools(false), None, Some(&amd64)).unwrap(), ["c", "a"]);
        assert_eq!(candidates(&pools(true), None, Some(&win)).unwrap(), ["b"]);
        // An index: every platform it has must be served.
        let multi = list(&["linux/amd64", "linux/arm64/v8"]);
        assert_eq!(candidates(&pools(true), None, Some(&multi)).unwrap(), ["c"]);
        // Unknown platforms: every pool, in order.
        assert_eq!(candidates(&pools(true), None, None).unwrap(), ["a", "b", "c"]);
        // A named pool, whatever its platforms or health.
        assert_eq!(candidates(&pools(false), Some("a"), Some(&win)).unwrap(), ["a"]);
        assert_eq!(candidates(&pools(true), Some("z"), None), Err(NoPool::Unknown("z".into())));
        let riscv = list(&["linux/riscv64"]);
        assert_eq!(
            candidates(&pools(true), None, Some(&riscv)).unwrap_err().to_string(),
            "no pool builds linux/riscv64 (pools: a [linux/amd64], b [windows/amd64], c [linux/amd64, linux/arm64])"
        );
    }
}

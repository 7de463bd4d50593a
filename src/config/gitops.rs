//! `[[gitops]]`: Git repositories that get each change's new app digests (and builder pins) as
//! one commit, for Argo CD and Flux to deploy. Each target names its remote, the branch it builds
//! on and the one it pushes to, the commit author, its credentials, and the files to edit.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use toml::de::DeValue;

use super::{DurationText, Secret, Validator, is_dns_label};

/// One `[[gitops]]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct GitopsTarget {
    pub name: String,
    /// `file://`, `https://` or `ssh://` (never holding credentials).
    pub repo: String,
    /// The branch commits build on.
    pub branch: String,
    /// The branch pushed to (`branch` unless another one leaves the commits for review).
    pub push_branch: String,
    pub author: Author,
    pub auth: GitAuth,
    pub files: Vec<GitopsFile>,
    /// `batch`: the changes that land within this window of the first one waiting become one
    /// commit (none: one commit per change).
    pub batch: Option<Duration>,
}

/// The shortest and the longest `batch` window.
pub const BATCH_MIN: Duration = Duration::from_secs(60);
pub const BATCH_MAX: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Author {
    pub name: String,
    pub email: String,
}

/// How the remote is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum GitAuth {
    None,
    /// An https token, sent as HTTP basic auth (never in a URL).
    Token {
        username: String,
        token: Secret,
        env: String,
    },
    /// An ssh private key file.
    SshKey(PathBuf),
}

/// One file a target edits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitopsFile {
    /// Relative to the repository's root.
    pub path: String,
    pub format: FileFormat,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFormat {
    /// The `images:` entry named by `image`'s repository gets its digest.
    Kustomize { image: String },
    /// The scalar at dotted `key` gets `image`'s digest.
    HelmValues { image: String, key: String },
    /// Lines marked `# {"builder-monitor": "NAME"}` get NAME's new reference.
    Marker,
}

impl GitopsFile {
    /// The `[[images]]` entry it writes, if one (a marker file names its own).
    pub fn image(&self) -> Option<&str> {
        match &self.format {
            FileFormat::Kustomize { image } | FileFormat::HelmValues { image, .. } => Some(image),
            FileFormat::Marker => None,
        }
    }
}

/// The action "image" a target's actions are recorded under: one action per target at a time,
/// the newest change's only, as for an app image.
pub fn action_subject(target: &str) -> String {
    format!("gitops:{target}")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGitops {
    name: Spanned<String>,
    repo: Spanned<String>,
    branch: Option<Spanned<String>>,
    push_branch: Option<Spanned<String>>,
    author: Option<Spanned<Author>>,
    credentials_env: Option<Spanned<String>>,
    username: Option<Spanned<String>>,
    ssh_key_file: Option<Spanned<String>>,
    files: Spanned<Vec<Spanned<RawFile>>>,
    batch: Option<Spanned<DurationText>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    path: Spanned<String>,
    format: Spanned<String>,
    image: Option<Spanned<String>>,
    key: Option<Spanned<String>>,
}

/// Whether `name` can be a Git branch (`git check-ref-format --branch`'s rules, the common part).
fn is_branch(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(['-', '/', '.'])
        && !name.ends_with(['/', '.'])
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && !name.bytes().any(|b| b.is_ascii_control() || b" ~^:?*[\\".contains(&b))
}

/// Whether an http URL's host is this machine.
fn is_loopback(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else { return false };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, port)| if port.bytes().all(|b| b.is_ascii_digit()) { h } else { authority });
    matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

/// Whether `path` stays inside the repository: relative, no `..`, no `.git`.
fn is_repo_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\\')
        && path.split('/').all(|part| !part.is_empty() && part != ".." && part != "." && part != ".git")
}

impl<'a> Validator<'a> {
    pub(super) fn gitops(
        &mut self,
        value: Option<Spanned<DeValue<'a>>>,
        images: Option<&[super::ImageSettings]>,
    ) -> Option<Vec<GitopsTarget>> {
        let (raws, mut ok): (Vec<RawGitops>, bool) = self.tables(value, "gitops");
        ok &= self.unique_names(raws.iter().map(|r| &r.name), "gitops");
        let mut out = Vec::new();
        for raw in raws {
            match self.gitops_target(raw, images) {
                Some(t) => out.push(t),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn gitops_target(&mut self, raw: RawGitops, images: Option<&[super::ImageSettings]>) -> Option<GitopsTarget> {
        let errors_before = self.diagnostics.len();
        if !is_dns_label(raw.name.get_ref()) {
            self.error(
                raw.name.span(),
                format!(
                    "gitops name \"{}\" is not a DNS label (lowercase letters, digits and '-')",
                    raw.name.get_ref()
                ),
            );
        }
        let repo = raw.repo.get_ref();
        let mut scheme = repo.split_once("://").map(|(s, _)| s);
        // Plain http only to this machine (a local Git server, the tests'): it counts as https.
        if scheme == Some("http") && is_loopback(repo) {
            scheme = Some("https");
        }
        match scheme {
            Some("file" | "https" | "ssh") => {}
            Some("http") => self.error(
                raw.repo.span(),
                "repo over plain http would send the token in the clear: use https:// (http:// only to localhost)",
            ),
            _ => self.error(raw.repo.span(), format!("repo \"{repo}\" is not a file://, https:// or ssh:// URL")),
        }
        // A URL with credentials in it would end up in logs and `git remote -v`.
        if let Some((_, rest)) = repo.split_once("://")
            && scheme != Some("ssh")
            && rest.split('/').next().is_some_and(|host| host.contains('@'))
        {
            self.error(raw.repo.span(), "repo must not carry credentials: name them with credentials_env");
        }
        let branch = |v: &mut Self, value: &Option<Spanned<String>>, what: &str| match value {
            Some(b) if !is_branch(b.get_ref()) => {
                v.error(b.span(), format!("{what} \"{}\" is not a valid Git branch name", b.get_ref()));
                None
            }
            Some(b) => Some(b.get_ref().clone()),
            None => None,
        };
        let base = branch(self, &raw.branch, "branch").unwrap_or_else(|| "main".to_string());
        let push_branch = branch(self, &raw.push_branch, "push_branch").unwrap_or_else(|| base.clone());
        let author = match &raw.author {
            Some(a) if a.get_ref().name.trim().is_empty() || !a.get_ref().email.contains('@') => {
                self.error(a.span(), "author needs a name and an email (name@host)");
                None
            }
            Some(a) => Some(a.get_ref().clone()),
            None => Some(Author { name: "builder-monitor".into(), email: "builder-monitor@localhost".into() }),
        };
        let auth = match (&raw.credentials_env, &raw.ssh_key_file) {
            (Some(_), Some(key)) => {
                self.error(key.span(), "set either credentials_env (https) or ssh_key_file (ssh), not both");
                None
            }
            (Some(env), None) => {
                if scheme != Some("https") {
                    self.error(env.span(), "credentials_env is an https token: the repo must be https://");
                }
                let username =
                    raw.username.as_ref().map(|u| u.get_ref().clone()).unwrap_or_else(|| "x-access-token".into());
                match self.secret_source(Some(env), None, "credentials") {
                    Ok(Some(token)) => Some(GitAuth::Token { username, token, env: env.get_ref().clone() }),
                    // Not resolved for this command (`status`, `plan`): never used.
                    Ok(None) => Some(GitAuth::None),
                    Err(()) => None,
                }
            }
            (None, Some(key)) => {
                if scheme != Some("ssh") {
                    self.error(key.span(), "ssh_key_file is for an ssh:// repo");
                }
                Some(GitAuth::SshKey(self.path(key.get_ref())))
            }
            (None, None) => Some(GitAuth::None),
        };
        if let (Some(u), None) = (&raw.username, &raw.credentials_env) {
            self.error(u.span(), "username goes with credentials_env");
        }
        let mut files = Vec::new();
        if raw.files.get_ref().is_empty() {
            self.error(raw.files.span(), "files must name at least one file to edit");
        }
        for entry in raw.files.get_ref() {
            if let Some(file) = self.gitops_file(entry.get_ref(), images) {
                if files.iter().any(|f: &GitopsFile| f.path == file.path && f.format == file.format) {
                    self.error(entry.span(), format!("{} is listed twice with the same format", file.path));
                }
                files.push(file);
            }
        }
        let batch = raw.batch.as_ref().and_then(|b| {
            let d = self.duration(b, "batch")?;
            if !(BATCH_MIN..=BATCH_MAX).contains(&d) {
                let message = format!("batch {} must be between 1m and 24h", b.get_ref().trim());
                self.error(b.span(), message);
            }
            Some(d)
        });
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(GitopsTarget {
            name: raw.name.into_inner(),
            repo: raw.repo.into_inner(),
            branch: base,
            push_branch,
            author: author?,
            auth: auth?,
            files,
            batch,
        })
    }

    fn gitops_file(&mut self, raw: &RawFile, images: Option<&[super::ImageSettings]>) -> Option<GitopsFile> {
        let errors_before = self.diagnostics.len();
        if !is_repo_path(raw.path.get_ref()) {
            self.error(
                raw.path.span(),
                format!("path \"{}\" must be relative to the repository, without `..` or `.git`", raw.path.get_ref()),
            );
        }
        let image = |v: &mut Self| -> Option<String> {
            let Some(image) = &raw.image else {
                v.error(
                    raw.format.span(),
                    format!("format \"{}\" needs `image` (an [[images]] name)", raw.format.get_ref()),
                );
                return None;
            };
            if let Some(images) = images
                && !images.iter().any(|i| &i.name == image.get_ref())
            {
                let known: Vec<&str> = images.iter().map(|i| i.name.as_str()).collect();
                v.error(
                    image.span(),
                    format!("unknown image \"{}\" (configured: {})", image.get_ref(), known.join(", ")),
                );
                return None;
            }
            Some(image.get_ref().clone())
        };
        let format = match raw.format.get_ref().as_str() {
            "kustomize" => image(self).map(|image| FileFormat::Kustomize { image }),
            "helm-values" => {
                let image = image(self);
                let key = match &raw.key {
                    Some(k) if k.get_ref().split('.').all(|part| !part.is_empty()) => Some(k.get_ref().clone()),
                    Some(k) => {
                        self.error(
                            k.span(),
                            format!("key \"{}\" is not a dotted path (e.g. \"image.digest\")", k.get_ref()),
                        );
                        None
                    }
                    None => {
                        self.error(
                            raw.format.span(),
                            "format \"helm-values\" needs `key`, the dotted path of the value (e.g. \"image.digest\")",
                        );
                        None
                    }
                };
                image.zip(key).map(|(image, key)| FileFormat::HelmValues { image, key })
            }
            "marker" => {
                if let Some(i) = &raw.image {
                    self.error(i.span(), "a marker file names its images on its lines (# {\"builder-monitor\": \"NAME\"}): no `image` here");
                }
                Some(FileFormat::Marker)
            }
            other => {
                self.error(
                    raw.format.span(),
                    format!("unknown format \"{other}\", expected kustomize, helm-values or marker"),
                );
                None
            }
        };
        if let (Some(k), Some(FileFormat::Kustomize { .. } | FileFormat::Marker)) = (&raw.key, &format) {
            self.error(k.span(), "`key` is for format \"helm-values\"");
        }
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(GitopsFile { path: raw.path.get_ref().clone(), format: format? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_and_paths() {
        for ok in ["main", "builder-monitor/updates", "release-1.2"] {
            assert!(is_branch(ok), "{ok}");
        }
        for bad in ["", "-x", "a..b", "a b", "a:b", "x.lock", "/a", "a/", "a//b", "a@{1}"] {
            assert!(!is_branch(bad), "{bad}");
        }
        for ok in ["apps/petclinic/kustomization.yaml", "values.yaml", ".github/workflows/build.yml"] {
            assert!(is_repo_path(ok), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../../b", ".git/config", "a//b", "a\\b", "./a"] {
            assert!(!is_repo_path(bad), "{bad}");
        }
    }
}

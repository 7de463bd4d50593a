//! Reading what a repository holds and removing manifests from it: its tags (`GET /v2/<name>/tags/
//! list`, page by page through `Link` or `last`, bounded by entries), a digest's referrers through
//! the OCI 1.1 referrers API, and manifest deletes by digest or tag (with a registry that does not
//! allow deletes named, and what to change). Every request stays on the registry's own origin:
//! a `Link` elsewhere is refused, never followed with our credentials.

use reqwest::header::LINK;
use reqwest::{Method, Response, StatusCode, Url};
use serde::Deserialize;

use builder_monitor_core::reference::{ImageRef, is_sha256_digest};
use builder_monitor_core::signing::Descriptor;

use super::{Call, Fetch, Lane, Payload, Registry, RegistryError, header_str, pull_scope};

/// Tags listed per repository at most: a listing that would go past it fails (whatever acts on
/// a listing must see all of it: a missed tag could be the one that reaches a digest).
pub const MAX_TAGS: usize = 50_000;
/// Tags asked for per page (`n`); Distribution 2.8 ignores it and answers all at once.
const PAGE: usize = 1000;
/// Bytes of one page of tags (or one referrers listing) read at most.
const MAX_PAGE_BYTES: usize = 8 << 20;
/// Pages followed at most, whatever each holds.
const MAX_PAGES: usize = MAX_TAGS / PAGE + 10;
/// Entries of a referrers API listing read at most.
const MAX_REFERRERS_LISTED: usize = 1000;

#[derive(Deserialize)]
struct TagPage {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct ReferrersIndex {
    #[serde(default)]
    manifests: Vec<serde_json::Value>,
}

/// What the referrers API answered for a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Referrers {
    /// The referrers listed (each entry that is a descriptor).
    Listed(Vec<Descriptor>),
    /// The registry has no referrers API (404 or 400): the referrers tag schema's index lists them.
    NoApi,
}

impl Registry {
    /// Every tag of `image`'s repository, in the order the registry gave them (empty when the
    /// repository does not exist). Pages follow the `Link` header; a registry that pages without
    /// one (`n` honoured, no `Link`) is asked again from the last tag seen. More than
    /// [`MAX_TAGS`] is an error, not a partial answer.
    pub async fn list_tags(&self, image: &ImageRef) -> Result<Vec<String>, RegistryError> {
        let endpoint = self.endpoint(image)?;
        let repository = image.repository();
        let mut url = endpoint.api_url(&Method::GET, &format!("{repository}/tags/list?n={PAGE}"))?;
        let mut tags: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let scope = pull_scope(repository);
        for _ in 0..MAX_PAGES {
            // Redirects only within the registry, as for manifests.
            let call =
                Call { repository, scope: &scope, fetch: Fetch::Manifest, payload: Payload::Empty, timeout: None };
            let response = endpoint.send_to(Method::GET, url.clone(), call).await?;
            match response.status() {
                s if s.is_success() => {}
                StatusCode::NOT_FOUND if tags.is_empty() => return Ok(tags),
                s => return Err(endpoint.invalid(format!("GET {repository}/tags/list answered HTTP {s}"))),
            }
            let next = endpoint.next_page(&response)?;
            let body = endpoint.read_body(response, MAX_PAGE_BYTES, "tag list").await?;
            let page: TagPage = serde_json::from_slice(&body)
                .map_err(|e| endpoint.invalid(format!("{repository}'s tag list is not a tag list: {e}")))?;
            let page = page.tags.unwrap_or_default();
            let (count, last) = (page.len(), page.last().cloned());
            let mut fresh = 0;
            for tag in page {
                if seen.insert(tag.clone()) {
                    tags.push(tag);
                    fresh += 1;
                }
            }
            if tags.len() > MAX_TAGS {
                return Err(endpoint.invalid(format!(
                    "{repository} has more than {MAX_TAGS} tags, more than one listing reads; nothing was done with it"
                )));
            }
            url = match (next, last) {
                (Some(next), _) => next,
                // `n` honoured without a `Link`: ask from the last tag seen, while that brings new ones.
                (None, Some(last)) if count >= PAGE && fresh > 0 => {
                    let mut next = url.clone();
                    next.query_pairs_mut().clear().append_pair("n", &PAGE.to_string()).append_pair("last", &last);
                    next
                }
                _ => return Ok(tags),
            };
        }
        Err(endpoint.invalid(format!("{repository}'s tag list did not end within {MAX_PAGES} pages")))
    }

    /// `digest`'s referrers as the OCI 1.1 referrers API lists them, or [`Referrers::NoApi`]. A
    /// repository the registry does not know answers an empty listing.
    pub async fn list_referrers(&self, image: &ImageRef, digest: &str) -> Result<Referrers, RegistryError> {
        let endpoint = self.endpoint(image)?;
        if !is_sha256_digest(digest) {
            return Err(endpoint.invalid(format!("subject digest \"{digest}\" is not a sha256 digest")));
        }
        let path = format!("{}/referrers/{digest}", image.repository());
        let response = endpoint.send(Method::GET, &path, image.repository(), Fetch::Manifest).await?;
        match response.status() {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND => {
                let body = endpoint.read_body(response, 64 << 10, "referrers answer").await.unwrap_or_default();
                if String::from_utf8_lossy(&body).contains("NAME_UNKNOWN") {
                    return Ok(Referrers::Listed(Vec::new()));
                }
                return Ok(Referrers::NoApi);
            }
            StatusCode::BAD_REQUEST => return Ok(Referrers::NoApi),
            s => return Err(endpoint.invalid(format!("GET referrers of {digest} answered HTTP {s}"))),
        }
        let body = endpoint.read_body(response, MAX_PAGE_BYTES, "referrers listing").await?;
        let index: ReferrersIndex = serde_json::from_slice(&body)
            .map_err(|e| endpoint.invalid(format!("the referrers of {digest} are not an index: {e}")))?;
        if index.manifests.len() > MAX_REFERRERS_LISTED {
            return Err(endpoint.invalid(format!(
                "{digest} has {} referrers, over the {MAX_REFERRERS_LISTED} read",
                index.manifests.len()
            )));
        }
        let listed = index.manifests.into_iter().filter_map(|m| serde_json::from_value(m).ok()).collect();
        Ok(Referrers::Listed(listed))
    }

    /// Deletes the manifest `reference` (a digest; a tag where the registry allows it) of
    /// `image`'s repository: `true` when deleted, `false` when it was not there. A registry that
    /// does not allow deletes (405, `UNSUPPORTED`) is a refusal that says what to change.
    pub async fn delete_manifest(&self, image: &ImageRef, reference: &str) -> Result<bool, RegistryError> {
        let endpoint = self.endpoint(image)?;
        let repository = image.repository();
        let scope = format!("repository:{repository}:delete");
        let url = endpoint.api_url(&Method::DELETE, &format!("{repository}/manifests/{reference}"))?;
        let call = Call { repository, scope: &scope, fetch: Fetch::Write, payload: Payload::Empty, timeout: None };
        let response = endpoint.send_to(Method::DELETE, url, call).await?;
        let what = format!("DELETE manifest {repository}@{reference}");
        match response.status() {
            s if s.is_success() => {
                self.shared.written.forget(image.registry(), repository, reference).await;
                Ok(true)
            }
            StatusCode::NOT_FOUND => Ok(false),
            StatusCode::METHOD_NOT_ALLOWED => Err(deletes_disabled(&endpoint, &what, None)),
            _ => match endpoint.refused(&what, response).await {
                RegistryError::Rejected { code: Some(code), .. } if &*code == "UNSUPPORTED" => {
                    Err(deletes_disabled(&endpoint, &what, Some(code)))
                }
                other => Err(other),
            },
        }
    }
}

/// The refusal of a registry that does not allow deletes, naming the setting that allows them.
fn deletes_disabled(endpoint: &Lane, what: &str, code: Option<Box<str>>) -> RegistryError {
    RegistryError::Rejected {
        registry: endpoint.settings.host.clone(),
        detail: format!(
            "{what}: the registry does not allow deleting manifests; allow it (CNCF Distribution and Debian's \
             docker-registry: `storage: delete: enabled: true` in its config, or REGISTRY_STORAGE_DELETE_ENABLED=true) \
             and run again"
        ),
        code: code.or_else(|| Some("UNSUPPORTED".into())),
    }
}

impl Lane {
    /// The next page a listing's `Link: <…>; rel="next"` names, on this registry's origin only.
    fn next_page(&self, response: &Response) -> Result<Option<Url>, RegistryError> {
        let Some(link) = header_str(response.headers(), LINK.as_str()) else { return Ok(None) };
        let Some(target) = next_link(&link) else { return Ok(None) };
        let url =
            response.url().join(target).map_err(|e| self.invalid(format!("a tag list's Link is not a URL: {e}")))?;
        if url.origin() != self.base.origin() {
            return Err(self.invalid(format!(
                "a tag list's next page is on {}, not on the registry's {}; credentials are not sent there",
                super::origin_of(&url),
                super::origin_of(&self.base)
            )));
        }
        Ok(Some(url))
    }
}

/// The target of the `rel="next"` entry of a `Link` header.
fn next_link(header: &str) -> Option<&str> {
    header.split(',').find_map(|entry| {
        let (target, params) = entry.trim().split_once(';')?;
        let next = params.split(';').any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"));
        next.then(|| target.trim().strip_prefix('<')?.strip_suffix('>')).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::next_link;

    #[test]
    fn the_next_page_is_the_link_whose_rel_is_next() {
        let header = r#"</v2/apps/web/tags/list?last=b&n=2>; rel="next""#;
        assert_eq!(next_link(header), Some("/v2/apps/web/tags/list?last=b&n=2"));
        let two = r#"<https://r.example/v2/x/tags/list?n=1>; rel="prev", </v2/x/tags/list?last=c&n=1>; rel=next"#;
        assert_eq!(next_link(two), Some("/v2/x/tags/list?last=c&n=1"));
        assert_eq!(next_link(r#"</v2/x/tags/list?n=1>; rel="prev""#), None);
        assert_eq!(next_link("garbage"), None);
    }
}

//! Registry push hook payloads: which tags a Distribution, Docker Hub or Harbor notification says
//! were pushed. Only parsed here; the digest a payload carries is never trusted.

use serde::Deserialize;

use super::parse;
use builder_monitor_core::reference::ImageRef;

/// A pushed tag a hook told us about: (registry when known, repository, tag).
pub(super) type Pushed = (Option<String>, String, String);

#[derive(Deserialize)]
struct DistributionEnvelope {
    #[serde(default)]
    events: Vec<DistributionEvent>,
}

#[derive(Deserialize)]
struct DistributionEvent {
    #[serde(default)]
    action: String,
    #[serde(default)]
    target: DistributionTarget,
    #[serde(default)]
    request: DistributionRequest,
}

#[derive(Deserialize, Default)]
struct DistributionTarget {
    #[serde(default)]
    repository: String,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    url: Option<String>,
}

#[derive(Deserialize, Default)]
struct DistributionRequest {
    #[serde(default)]
    host: Option<String>,
}

fn url_host(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    let host = u.host_str()?;
    Some(match u.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// CNCF Distribution notifications: `push` events with a tag (a multi-arch push also sends tagless
/// events for its children; those are ignored).
pub(super) fn distribution_pushes(body: &[u8]) -> Result<Vec<Pushed>, String> {
    let envelope: DistributionEnvelope = parse(body, "Distribution notification")?;
    Ok(envelope
        .events
        .into_iter()
        .filter(|e| e.action == "push" && !e.target.repository.is_empty())
        .filter_map(|e| {
            let tag = e.target.tag.filter(|t| !t.is_empty())?;
            let registry = e.target.url.as_deref().and_then(url_host).or(e.request.host);
            Some((registry, e.target.repository, tag))
        })
        .collect())
}

#[derive(Deserialize)]
struct DockerHubPayload {
    push_data: DockerHubPush,
    repository: DockerHubRepository,
}

#[derive(Deserialize)]
struct DockerHubPush {
    tag: String,
}

#[derive(Deserialize)]
struct DockerHubRepository {
    repo_name: String,
}

pub(super) fn dockerhub_pushes(body: &[u8]) -> Result<Vec<Pushed>, String> {
    let payload: DockerHubPayload = parse(body, "Docker Hub webhook")?;
    let repo = payload.repository.repo_name;
    let repo = if repo.contains('/') { repo } else { format!("library/{repo}") };
    Ok(vec![(Some("docker.io".into()), repo, payload.push_data.tag)])
}

#[derive(Deserialize)]
struct HarborPayload {
    #[serde(rename = "type", default)]
    kind: String,
    event_data: HarborEventData,
}

#[derive(Deserialize)]
struct HarborEventData {
    #[serde(default)]
    resources: Vec<HarborResource>,
    #[serde(default)]
    repository: Option<HarborRepository>,
}

#[derive(Deserialize)]
struct HarborResource {
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    resource_url: Option<String>,
}

#[derive(Deserialize)]
struct HarborRepository {
    #[serde(default)]
    repo_full_name: Option<String>,
}

pub(super) fn harbor_pushes(body: &[u8]) -> Result<Vec<Pushed>, String> {
    let payload: HarborPayload = parse(body, "Harbor webhook")?;
    if payload.kind != "PUSH_ARTIFACT" && payload.kind != "pushImage" {
        return Ok(Vec::new());
    }
    let repo_name = payload.event_data.repository.and_then(|r| r.repo_full_name);
    Ok(payload
        .event_data
        .resources
        .into_iter()
        .filter_map(|r| {
            if let Some(image) = r.resource_url.as_deref().and_then(|u| ImageRef::parse(u).ok())
                && let Some(tag) = image.tag().filter(|_| image.digest().is_none())
            {
                return Some((Some(image.registry().to_string()), image.repository().to_string(), tag.to_string()));
            }
            Some((None, repo_name.clone()?, r.tag.filter(|t| !t.is_empty())?))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_envelope() {
        let body = br#"{"events": [
            {"action": "push", "target": {"repository": "demo/multi", "digest": "sha256:a", "url": "http://127.0.0.1:5001/v2/demo/multi/manifests/sha256:a"}},
            {"action": "push", "target": {"repository": "demo/multi", "tag": "v1", "url": "http://127.0.0.1:5001/v2/demo/multi/manifests/sha256:b"}, "request": {"host": "127.0.0.1:5001"}},
            {"action": "pull", "target": {"repository": "demo/app", "tag": "v1"}},
            {"action": "delete", "target": {"repository": "demo/app", "tag": "v1"}}
        ]}"#;
        assert_eq!(
            distribution_pushes(body).unwrap(),
            [(Some("127.0.0.1:5001".into()), "demo/multi".into(), "v1".into())]
        );
        assert!(distribution_pushes(b"{").is_err());
        assert!(distribution_pushes(b"{}").unwrap().is_empty());
    }

    #[test]
    fn dockerhub_and_harbor_payloads() {
        let hub = br#"{"push_data": {"tag": "24", "pusher": "x"}, "repository": {"repo_name": "heroku/builder", "namespace": "heroku"}}"#;
        assert_eq!(dockerhub_pushes(hub).unwrap(), [(Some("docker.io".into()), "heroku/builder".into(), "24".into())]);
        let official = br#"{"push_data": {"tag": "latest"}, "repository": {"repo_name": "ubuntu"}}"#;
        assert_eq!(dockerhub_pushes(official).unwrap()[0].1, "library/ubuntu");
        let harbor = br#"{"type": "PUSH_ARTIFACT", "event_data": {"resources": [{"digest": "sha256:a", "tag": "latest", "resource_url": "harbor.example.com/library/app:latest"}], "repository": {"repo_full_name": "library/app"}}}"#;
        assert_eq!(
            harbor_pushes(harbor).unwrap(),
            [(Some("harbor.example.com".into()), "library/app".into(), "latest".into())]
        );
        let deleted = br#"{"type": "DELETE_ARTIFACT", "event_data": {"resources": []}}"#;
        assert!(harbor_pushes(deleted).unwrap().is_empty());
    }
}

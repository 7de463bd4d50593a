//! Creating a pool's build object (a Job, a kpack Build) the way a careful person would with
//! `kubectl create --validate=strict`: with `fieldValidation=Strict`, so a field the cluster's API
//! does not know (an older cluster than the daemon's types, a CRD of another version) is refused
//! naming the field, instead of being dropped silently — a Job whose `spec.managedBy` an older
//! server dropped would run in the wrong cluster. kube-rs's `PostParams` cannot ask for it, so the
//! request is made here. The server's other warnings (a deprecated node label, Pod Security's
//! `warn` level) come back as `Warning` headers and are returned, for the runner to log.

use http_body_util::BodyExt;
use kube::api::{Api, DynamicObject};
use kube::core::Status;
use serde_json::Value;

use super::RunnerError;
use builder_monitor_core::deploy::FIELD_MANAGER;

/// Creates `object` through `api` with `fieldValidation=Strict`; on success, the server's
/// `Warning` headers (their text, without the `299 -` code). A refusal is the server's `Status`
/// as `kube::Error::Api`, as kube-rs's own calls return it.
pub async fn create(api: &Api<DynamicObject>, object: &Value) -> Result<Vec<String>, kube::Error> {
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let uri = format!("{}?fieldManager={FIELD_MANAGER}&fieldValidation=Strict", api.resource_url());
    let request = hyper::Request::post(uri)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(body))
        .map_err(kube::Error::HttpError)?;
    let response = api.clone().into_client().send(request).await?;
    let status = response.status();
    let warnings: Vec<String> =
        response.headers().get_all("warning").iter().filter_map(|w| w.to_str().ok()).map(warning_text).collect();
    let bytes = response.into_body().collect().await?.to_bytes();
    if status.is_success() {
        return Ok(warnings);
    }
    let text = String::from_utf8_lossy(&bytes);
    let status = serde_json::from_str::<Status>(&text).unwrap_or_else(|_| {
        Status::failure(&format!("{status}: {}", text.chars().take(500).collect::<String>()), "")
            .with_code(status.as_u16())
    });
    Err(kube::Error::Api(status.boxed()))
}

/// Why the API refused to create `kind` `name`: the fields it does not know, named, when a
/// strict check refused them; else the server's answer.
pub fn refusal(kind: &'static str, name: &str, source: kube::Error) -> RunnerError {
    if let kube::Error::Api(status) = &source {
        let fields = refused_fields(&status.message);
        if !fields.is_empty() {
            let fields = fields.iter().map(|f| format!("\"{f}\"")).collect::<Vec<_>>().join(", ");
            return RunnerError::Refused { kind, name: name.to_string(), fields, message: status.message.clone() };
        }
    }
    RunnerError::Create { kind, name: name.to_string(), source }
}

/// A `Warning` header's text: `299 - "text"` (RFC 7234) as the API server writes it.
fn warning_text(header: &str) -> String {
    let text = header.strip_prefix("299 - ").unwrap_or(header);
    text.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(text).replace("\\\"", "\"")
}

/// The fields a strict refusal names (`unknown field "spec.x"`, `duplicate field "y"`), in order;
/// empty when the refusal is not about fields.
pub fn refused_fields(message: &str) -> Vec<String> {
    let mut fields = Vec::new();
    for marker in ["unknown field \"", "duplicate field \""] {
        let mut rest = message;
        while let Some(at) = rest.find(marker) {
            rest = &rest[at + marker.len()..];
            if let Some(end) = rest.find('"') {
                fields.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strict_refusal_names_its_fields() {
        let message = "Job in version \"v1\" cannot be handled as a Job: strict decoding error: unknown field \"spec.managedBy\", unknown field \"spec.template.spec.x\", duplicate field \"metadata.name\"";
        assert_eq!(refused_fields(message), ["spec.managedBy", "spec.template.spec.x", "metadata.name"]);
        assert!(refused_fields("jobs.batch \"a\" already exists").is_empty());
    }

    #[test]
    fn warning_headers_lose_their_code_and_quotes() {
        assert_eq!(
            warning_text(
                r#"299 - "spec.template.spec.nodeSelector[beta.kubernetes.io/arch]: deprecated since v1.14; use \"kubernetes.io/arch\" instead""#
            ),
            r#"spec.template.spec.nodeSelector[beta.kubernetes.io/arch]: deprecated since v1.14; use "kubernetes.io/arch" instead"#
        );
        assert_eq!(warning_text("plain"), "plain");
    }
}

//! What signatures cover: cosign's simple-signing payload (the tag form's `.sig` layer) and a
//! DSSE envelope around an in-toto Statement v1 (the `.att` layer), signed over DSSE's PAE.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::key::{Signer, Verifier};
use crate::reference::is_sha256_digest;

/// The DSSE payload type of an in-toto Statement.
pub const DSSE_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// An in-toto Statement v1's `_type`.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// A payload that cannot bind what it was asked to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("\"{0}\" is not a manifest digest: give sha256:<64 lowercase hex>")]
    Digest(String),
}

/// cosign's simple-signing payload binding `digest` (`sha256:<hex>`) to `docker_reference`
/// (`<registry>/<repository>`, no tag), with no optional claims: the exact bytes cosign signs
/// (its key order, `"optional":null`).
pub fn simple_signing_payload(docker_reference: &str, digest: &str) -> Result<Vec<u8>, PayloadError> {
    if !is_sha256_digest(digest) {
        return Err(PayloadError::Digest(digest.to_string()));
    }
    #[derive(Serialize)]
    struct Payload<'a> {
        critical: Critical<'a>,
        optional: Option<()>,
    }
    #[derive(Serialize)]
    struct Critical<'a> {
        identity: serde_json::Value,
        image: serde_json::Value,
        #[serde(rename = "type")]
        kind: &'a str,
    }
    let payload = Payload {
        critical: Critical {
            identity: json!({ "docker-reference": docker_reference }),
            image: json!({ "docker-manifest-digest": digest }),
            kind: "cosign container image signature",
        },
        optional: None,
    };
    Ok(serde_json::to_vec(&payload).expect("strings and nulls serialise"))
}

/// DSSE's pre-authentication encoding: `"DSSEv1" SP len(type) SP type SP len(payload) SP payload`,
/// lengths in bytes, ASCII decimal. The signature of an envelope is over this, not the payload.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {payload_type} {} ", payload_type.len(), payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// An in-toto Statement v1 about one image digest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub statement_type: String,
    pub subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    pub name: String,
    /// Algorithm → lowercase hex (`sha256` here).
    pub digest: BTreeMap<String, String>,
}

impl Statement {
    /// A statement whose one subject is `name` at `digest` (`sha256:<hex>`).
    pub fn new(
        name: &str,
        digest: &str,
        predicate_type: &str,
        predicate: serde_json::Value,
    ) -> Result<Self, PayloadError> {
        let Some(hex) = digest.strip_prefix("sha256:").filter(|_| is_sha256_digest(digest)) else {
            return Err(PayloadError::Digest(digest.to_string()));
        };
        Ok(Self {
            statement_type: STATEMENT_TYPE.to_string(),
            subject: vec![Subject { name: name.to_string(), digest: BTreeMap::from([("sha256".into(), hex.into())]) }],
            predicate_type: predicate_type.to_string(),
            predicate,
        })
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a statement serialises")
    }
}

/// A DSSE envelope (`application/vnd.dsse.envelope.v1+json`): the payload in base64 and its
/// signatures over the PAE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// Standard base64 of the payload.
    pub payload: String,
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    /// Empty, as cosign writes it: verifiers are given the key.
    pub keyid: String,
    /// Standard base64 of the ASN.1 DER signature over the PAE.
    pub sig: String,
}

impl Envelope {
    /// `payload` of `payload_type`, signed by `signer` over the PAE.
    pub fn sign(signer: &Signer, payload_type: &str, payload: &[u8]) -> Self {
        let sig = signer.sign(&pae(payload_type, payload));
        Self {
            payload_type: payload_type.to_string(),
            payload: STANDARD.encode(payload),
            signatures: vec![EnvelopeSignature { keyid: String::new(), sig: STANDARD.encode(sig) }],
        }
    }

    /// An in-toto statement signed by `signer`.
    pub fn statement(signer: &Signer, statement: &Statement) -> Self {
        Self::sign(signer, DSSE_PAYLOAD_TYPE, &statement.to_json())
    }

    /// The payload's bytes; `None` when it is not base64.
    pub fn payload_bytes(&self) -> Option<Vec<u8>> {
        STANDARD.decode(&self.payload).ok()
    }

    /// Whether one of the signatures is `verifier`'s over the PAE.
    pub fn verify(&self, verifier: &Verifier) -> bool {
        let Some(payload) = self.payload_bytes() else { return false };
        let pae = pae(&self.payload_type, &payload);
        self.signatures.iter().any(|s| STANDARD.decode(&s.sig).is_ok_and(|sig| verifier.verify(&pae, &sig)))
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an envelope serialises")
    }
}

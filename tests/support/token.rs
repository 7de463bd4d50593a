//! A Docker-style token server: `GET /token?service=&scope=` returns an RS256 JWT that the
//! registry (configured with `auth.token` and the fixture certificate) accepts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::{Request, State};
use axum::http::{Response, StatusCode};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde_json::json;

use super::fixture;

struct Shared {
    key: RsaKeyPair,
    cert_der: Vec<u8>,
    credentials: Option<(String, String)>,
    expires_in: u64,
    fetches: AtomicUsize,
}

pub struct TokenServer {
    /// Realm URL to configure in the registry.
    pub realm: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

fn pem_der(path: &std::path::Path) -> Vec<u8> {
    let text = std::fs::read_to_string(path).expect("read PEM fixture");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    STANDARD.decode(body).expect("PEM base64")
}

impl TokenServer {
    /// `credentials`: when set, Basic auth with them gets pull+push; anonymous requests get pull only.
    pub async fn start(credentials: Option<(&str, &str)>, expires_in: u64) -> Self {
        let key = RsaKeyPair::from_pkcs8(&pem_der(&fixture("token-key.pem"))).expect("RSA key fixture");
        let shared = Arc::new(Shared {
            key,
            cert_der: pem_der(&fixture("token-cert.pem")),
            credentials: credentials.map(|(u, p)| (u.to_string(), p.to_string())),
            expires_in,
            fetches: AtomicUsize::new(0),
        });
        let app = axum::Router::new().route("/token", axum::routing::get(token)).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind token server");
        let realm = format!("http://{}/token", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TokenServer { realm, shared, task }
    }

    /// Tokens issued so far.
    pub fn fetches(&self) -> usize {
        self.shared.fetches.load(Ordering::SeqCst)
    }
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn token(State(shared): State<Arc<Shared>>, request: Request) -> Response<String> {
    let query = request.uri().query().unwrap_or_default().to_string();
    let url = reqwest::Url::parse(&format!("http://x/?{query}")).unwrap();
    let mut service = String::new();
    let mut scopes = Vec::new();
    for (k, v) in url.query_pairs() {
        match k.as_ref() {
            "service" => service = v.to_string(),
            "scope" => scopes.extend(v.split(' ').map(str::to_string)),
            _ => {}
        }
    }
    let basic = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok());
    let mut user = String::new();
    let mut authenticated = false;
    if let Some(pair) = basic {
        match &shared.credentials {
            Some((u, p)) if pair == format!("{u}:{p}") => {
                user = u.clone();
                authenticated = true;
            }
            _ => {
                let mut r = Response::new(String::new());
                *r.status_mut() = StatusCode::UNAUTHORIZED;
                return r;
            }
        }
    }
    let access: Vec<serde_json::Value> = scopes
        .iter()
        .filter_map(|scope| {
            let (kind, rest) = scope.split_once(':')?;
            let (name, actions) = rest.rsplit_once(':')?;
            let actions: Vec<&str> = actions
                .split(',')
                .filter(|a| !a.is_empty() && (authenticated || shared.credentials.is_none() || *a == "pull"))
                .collect();
            Some(json!({ "type": kind, "name": name, "actions": actions }))
        })
        .collect();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let header = json!({ "typ": "JWT", "alg": "RS256", "x5c": [STANDARD.encode(&shared.cert_der)] });
    let claims = json!({
        "iss": "test-token-issuer", "sub": user, "aud": service,
        "exp": now + shared.expires_in, "nbf": now - 10, "iat": now,
        "jti": format!("{now}-{}", shared.fetches.load(Ordering::SeqCst)), "access": access,
    });
    let signing_input =
        format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
    let mut signature = vec![0; shared.key.public().modulus_len()];
    shared
        .key
        .sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signing_input.as_bytes(), &mut signature)
        .expect("sign token");
    let jwt = format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature));
    shared.fetches.fetch_add(1, Ordering::SeqCst);
    let body = json!({ "token": jwt, "access_token": jwt, "expires_in": shared.expires_in }).to_string();
    let mut r = Response::new(body);
    r.headers_mut().insert("content-type", "application/json".parse().unwrap());
    r
}

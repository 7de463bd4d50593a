//! Alerts: how an event leaves (`emit`: routed, recorded, logged), what each receiver type gets
//! (signed webhook JSON, Slack Block Kit, CloudEvents 1.0), and one send. Durable, retried
//! delivery is in `deliver`; who hears of failures, in `outage`.

mod deliver;
mod emit;
pub mod outage;
mod render;

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

pub use deliver::Dispatcher;
pub use emit::{emit, emitted, route};
pub use render::{Rendered, cloudevent, render, short_image, slack_body, summary};

use crate::config::{AlertSettings, Secret};
use builder_monitor_core::event::Event;

/// How each alert treats the failure events of a watch about these builders (`outage`).
pub fn audiences(alerts: &[AlertSettings], builders: &[&str]) -> Vec<outage::Audience> {
    alerts
        .iter()
        .filter(|a| a.wants_builder(builders.iter().copied()))
        .map(|a| outage::Audience {
            alert: a.name.clone(),
            threshold: a.failure_threshold,
            check_failed: a.wants_type(builder_monitor_core::event::EventType::CheckFailed.as_str()),
            check_recovered: a.wants_type(builder_monitor_core::event::EventType::CheckRecovered.as_str()),
            registry_unavailable: a.wants_type(builder_monitor_core::event::EventType::RegistryUnavailable.as_str()),
            registry_recovered: a.wants_type(builder_monitor_core::event::EventType::RegistryRecovered.as_str()),
        })
        .collect()
}

/// What `alert test` got: the test event's id, the receiver's answer and how long it took.
pub struct TestDelivery {
    pub event_id: String,
    pub outcome: SendOutcome,
    pub elapsed: Duration,
}

/// Sends one test event (type `alert.test`) to an alert, once, without the ledger (`alert test`).
pub async fn send_test(
    settings: &AlertSettings,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<TestDelivery, AlertError> {
    let sender = Sender::new(settings.clone())?;
    let event = test_event(now);
    let started = std::time::Instant::now();
    let outcome = sender.send(&event).await;
    Ok(TestDelivery { event_id: event.id, outcome, elapsed: started.elapsed() })
}

/// The event `alert test` sends: type `alert.test`, a builder named `builder-monitor-test`.
pub fn test_event(now: chrono::DateTime<chrono::Utc>) -> Event {
    let time = builder_monitor_core::schedule::timestamp(now);
    let id = format!(
        "test-{}",
        builder_monitor_core::event::stable_id(&["alert.test", &builder_monitor_core::schedule::timestamp_millis(now)])
    );
    let subject = builder_monitor_core::event::Subject {
        name: "builder-monitor-test".into(),
        image: "example.invalid/builder-monitor/test:latest".into(),
    };
    Event::new(id, builder_monitor_core::event::EventType::AlertTest, time, subject)
}

/// `sha256=<hex HMAC-SHA256(secret, body)>`.
pub fn signature(secret: &Secret, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.expose().as_bytes());
    format!("sha256={}", hex::encode(ring::hmac::sign(&key, body).as_ref()))
}

/// What a receiver made of one send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// 2xx.
    Delivered { status: u16 },
    /// 408, 429, 5xx, timeouts, connection errors: try again later.
    Retry { status: Option<u16>, detail: String, retry_after: Option<Duration> },
    /// Any other answer: retrying would not help.
    Rejected { status: Option<u16>, detail: String },
}

impl SendOutcome {
    /// What the ledger keeps as the last status.
    pub fn describe(&self) -> String {
        match self {
            SendOutcome::Delivered { status } => format!("HTTP {status}"),
            SendOutcome::Retry { detail, .. } | SendOutcome::Rejected { detail, .. } => detail.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("alert {alert}: {detail}")]
pub struct AlertError {
    pub alert: String,
    pub detail: String,
}

/// Sends events to one alert's receiver.
pub struct Sender {
    pub settings: AlertSettings,
    http: reqwest::Client,
}

impl Sender {
    pub fn new(settings: AlertSettings) -> Result<Self, AlertError> {
        let origin = reqwest::Url::parse(settings.url.expose())
            .ok()
            .map(|u| (u.host_str().map(str::to_string), u.port_or_known_default()));
        // Follow redirects only within the receiver's own host: a redirect elsewhere must not carry
        // the event (or a signature) to someone else.
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            let next = (attempt.url().host_str().map(str::to_string), attempt.url().port_or_known_default());
            if Some(&next) == origin.as_ref() && attempt.previous().len() < 5 {
                attempt.follow()
            } else {
                attempt.stop()
            }
        });
        // The process's TLS provider (reqwest is built without one): set here too, so any caller
        // that builds a sender, a test or a command, has it.
        crate::install_crypto_provider();
        let http = reqwest::Client::builder()
            .user_agent(crate::USER_AGENT)
            .timeout(settings.timeout)
            .redirect(policy)
            .danger_accept_invalid_certs(settings.insecure)
            .build()
            .map_err(|e| AlertError {
                alert: settings.name.clone(),
                detail: format!("cannot build HTTP client: {e}"),
            })?;
        Ok(Sender { settings, http })
    }

    /// One POST of `event`, rendered for this receiver type.
    pub async fn send(&self, event: &Event) -> SendOutcome {
        let rendered = render(self.settings.kind, event);
        let mut headers = HeaderMap::new();
        for (k, v) in &self.settings.headers {
            if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
                headers.insert(k, v);
            }
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(rendered.content_type));
        let mut put = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.insert(name, v);
            }
        };
        put("x-builder-monitor-event", event.event_type.as_str());
        put("x-builder-monitor-delivery", &event.id);
        if let Some(secret) = &self.settings.secret {
            let mut value =
                HeaderValue::from_str(&signature(secret, &rendered.body)).unwrap_or(HeaderValue::from_static(""));
            value.set_sensitive(true);
            headers.insert("x-builder-monitor-signature-256", value);
        }
        let response = self.http.post(self.settings.url.expose()).headers(headers).body(rendered.body).send().await;
        match response {
            Ok(r) => classify_response(r.status(), r.headers()),
            Err(e) => SendOutcome::Retry { status: None, detail: describe(e), retry_after: None },
        }
    }
}

fn classify_response(status: StatusCode, headers: &HeaderMap) -> SendOutcome {
    let code = status.as_u16();
    if status.is_success() {
        return SendOutcome::Delivered { status: code };
    }
    let retry_after = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s.min(3600)));
    match code {
        408 | 429 | 500..=599 => SendOutcome::Retry { status: Some(code), detail: format!("HTTP {code}"), retry_after },
        300..=399 => SendOutcome::Rejected {
            status: Some(code),
            detail: format!("HTTP {code}: redirect to another host not followed"),
        },
        _ => SendOutcome::Rejected { status: Some(code), detail: format!("HTTP {code}") },
    }
}

/// An error without the URL reqwest puts in it (receiver URLs can carry tokens).
fn describe(error: reqwest::Error) -> String {
    let timeout = error.is_timeout();
    let connect = error.is_connect();
    let error = error.without_url();
    let mut parts = Vec::new();
    if timeout {
        parts.push("timed out".to_string());
    } else if connect {
        parts.push("connection failed".to_string());
    }
    let mut source: Option<&dyn std::error::Error> = Some(&error);
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p == &text) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_known_answer() {
        // RFC 4231 test case 2.
        let sig = signature(&Secret::new("Jefe"), b"what do ya want for nothing?");
        assert_eq!(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn response_classes() {
        let h = HeaderMap::new();
        assert_eq!(classify_response(StatusCode::OK, &h), SendOutcome::Delivered { status: 200 });
        assert_eq!(classify_response(StatusCode::ACCEPTED, &h), SendOutcome::Delivered { status: 202 });
        for code in [408u16, 429, 500, 503] {
            assert!(matches!(classify_response(StatusCode::from_u16(code).unwrap(), &h), SendOutcome::Retry { .. }));
        }
        for code in [301u16, 400, 401, 404, 410] {
            assert!(matches!(classify_response(StatusCode::from_u16(code).unwrap(), &h), SendOutcome::Rejected { .. }));
        }
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert!(matches!(
            classify_response(StatusCode::TOO_MANY_REQUESTS, &h),
            SendOutcome::Retry { retry_after: Some(d), .. } if d == Duration::from_secs(7)
        ));
    }
}

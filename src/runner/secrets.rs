//! What no command's output, error or event may show: every secret value the config holds.

use crate::config::Config;

/// Every secret value the config holds (registry passwords, the API token, alert secrets and
/// receiver URLs): none may leave the daemon in a command's output.
#[derive(Debug, Clone, Default)]
pub struct Secrets(Vec<String>);

impl Secrets {
    pub fn new(values: impl IntoIterator<Item = String>) -> Self {
        let mut values: Vec<String> = values.into_iter().filter(|v| !v.is_empty()).collect();
        // Longest first, so a secret that contains another is replaced whole.
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Secrets(values)
    }

    pub fn of(config: &Config) -> Self {
        use base64::Engine as _;
        let mut values = Vec::new();
        for registry in config.registries.values() {
            if let crate::config::Credentials::Basic { username, password, .. } = &registry.credentials {
                values.push(password.expose().to_string());
                // How a Docker config file spells them: a command that prints one leaks both.
                let auth = format!("{username}:{}", password.expose());
                values.push(base64::engine::general_purpose::STANDARD.encode(auth));
            }
        }
        for target in &config.gitops {
            if let crate::config::GitAuth::Token { username, token, .. } = &target.auth {
                values.push(token.expose().to_string());
                // How it travels: HTTP basic auth.
                values.push(base64::engine::general_purpose::STANDARD.encode(format!("{username}:{}", token.expose())));
            }
        }
        if let Some(signing) = &config.signing {
            values.extend(signing_secrets(signing));
        }
        if let Some(token) = config.server.as_ref().and_then(|s| s.api_token.as_ref()) {
            values.push(token.expose().to_string());
        }
        for alert in &config.alerts {
            values.extend(alert.secret.as_ref().map(|s| s.expose().to_string()));
            let url = alert.url.expose();
            values.push(url.to_string());
            // The path and query carry a tokenised URL's token; a short path ("/hook") is no secret.
            if let Some(after_host) = url.find("://").and_then(|i| url[i + 3..].find('/').map(|j| &url[i + 3 + j..]))
                && after_host.len() >= 8
            {
                values.push(after_host.to_string());
            }
        }
        Secrets::new(values)
    }

    /// `text` with every secret replaced by `***`.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.0 {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "***");
            }
        }
        out
    }
}

/// `[signing]`'s password and private key as they are given (the variables' values, the key
/// file's text), with each line of the key's PEM body: a command that prints one part leaks it.
fn signing_secrets(signing: &crate::config::SigningSettings) -> Vec<String> {
    let mut values = Vec::new();
    if let Some(password) = signing.password_env.as_ref().and_then(std::env::var_os) {
        values.push(password.to_string_lossy().into_owned());
    }
    let pem = match &signing.key {
        Some(crate::config::KeySource::Env(var)) => std::env::var(var).ok(),
        Some(crate::config::KeySource::File(path)) => std::fs::read_to_string(path).ok(),
        None => None,
    };
    if let Some(pem) = pem {
        // Base64 lines long enough to be the key's own, not a header's word.
        values
            .extend(pem.lines().map(str::trim).filter(|l| l.len() >= 16 && !l.starts_with("-----")).map(String::from));
        values.push(pem);
    }
    values
}

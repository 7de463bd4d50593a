//! STUB replaced by the helper's module at merge.
use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("{0}")]
    Invalid(String),
}

pub fn read(path: &Path) -> Result<Value, TemplateError> {
    let text = std::fs::read_to_string(path).map_err(|e| TemplateError::Invalid(format!("{}: {e}", path.display())))?;
    parse(&text, &path.display().to_string())
}

pub fn parse(text: &str, origin: &str) -> Result<Value, TemplateError> {
    serde_json::from_str(text).map_err(|e| TemplateError::Invalid(format!("{origin}: {e}")))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub why: &'static str,
}

pub fn refusals(_template: &Value, _allow_privileged: bool) -> Vec<Refusal> {
    Vec::new()
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct KpackFields {
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Value>,
    pub affinity: Option<Value>,
    pub runtime_class_name: Option<String>,
    pub scheduler_name: Option<String>,
    pub priority_class_name: Option<String>,
    pub service_account_name: Option<String>,
    pub env: Vec<Value>,
    pub resources: Option<Value>,
}

pub fn kpack_fields(_template: &Value) -> Result<KpackFields, Vec<String>> {
    Ok(KpackFields::default())
}

pub fn merge(_templates: &[&Value], build: &Value) -> Result<Value, TemplateError> {
    Ok(build.clone())
}

//! The new config's history: the new base's entries, then the app's above the cut.

use serde_json::{Map, Value};

use super::Refusal;
use super::image::Side;
use super::malformed;

/// History entries of one image, lined up with its layers. A history whose non-empty entries do not
/// count the layers is replaced by one empty entry per layer, as imgutil's `NormalizedHistory` does.
pub(super) struct History {
    pub(super) entries: Vec<Value>,
    /// False when the config has no history at all (the result has none when both lack one).
    pub(super) present: bool,
}

pub(super) fn is_empty_layer(entry: &Value) -> bool {
    entry.get("empty_layer").and_then(Value::as_bool) == Some(true)
}

pub(super) fn history(config: &Map<String, Value>, layers: usize, side: Side) -> Result<History, Refusal> {
    let entries = match config.get("history") {
        None | Some(Value::Null) => {
            return Ok(History { entries: vec![Value::Object(Map::new()); layers], present: false });
        }
        Some(Value::Array(entries)) => entries,
        Some(_) => return malformed(side.config(), "history is not an array"),
    };
    if entries.iter().filter(|e| !is_empty_layer(e)).count() == layers {
        Ok(History { entries: entries.clone(), present: true })
    } else {
        Ok(History { entries: vec![Value::Object(Map::new()); layers], present: true })
    }
}

/// The history entries above the first `lower` layers. Empty-layer entries right above the cut
/// belong to the old base (a Dockerfile's closing ENV/USER/LABEL): the new base brings its own.
pub(super) fn upper_history(entries: &[Value], lower: usize) -> Vec<Value> {
    let mut seen = 0;
    let mut start = entries.len();
    for (i, entry) in entries.iter().enumerate() {
        if is_empty_layer(entry) {
            continue;
        }
        if seen == lower {
            start = i;
            break;
        }
        seen += 1;
    }
    entries[start..].to_vec()
}

//! Logging recorded events: one summary line each, and the whole JSON document for machines
//! (`--log-format json`) or at debug level.

use std::sync::atomic::{AtomicBool, Ordering};

use builder_monitor_core::event::{Event, EventType};

/// Whether logged events carry their whole document at INFO (set once at start for
/// `--log-format json`, whose readers are machines).
static LOG_DOCUMENTS: AtomicBool = AtomicBool::new(false);

/// Makes [`log`] add the whole JSON document to every line, not only at debug level.
pub fn log_documents(on: bool) {
    LOG_DOCUMENTS.store(on, Ordering::Relaxed);
}

/// Whether an event's line is DEBUG: a watch's `check.failed` and `check.recovered`, whose
/// failure and recovery the monitor's own lines say (one WARN and one INFO for a watch failing
/// alone, one pair for a registry's outage: `monitor::failure_log`). Every other event is INFO.
fn quiet(event_type: EventType) -> bool {
    matches!(event_type, EventType::CheckFailed | EventType::CheckRecovered)
}

/// Logs the event once it is recorded: its [`Event::summary`] and id at INFO (DEBUG for
/// [`quiet`] types); the whole document too with [`log_documents`] or when debug is on for
/// `builder_monitor_core::event`.
pub fn log(event: &Event) {
    macro_rules! line {
        ($($arg:tt)+) => {
            if quiet(event.event_type) {
                tracing::debug!(target: "builder_monitor_core::event", $($arg)+)
            } else {
                tracing::info!(target: "builder_monitor_core::event", $($arg)+)
            }
        };
    }
    let summary = event.summary();
    if LOG_DOCUMENTS.load(Ordering::Relaxed)
        || tracing::enabled!(target: "builder_monitor_core::event", tracing::Level::DEBUG)
    {
        let document = serde_json::to_string(event).unwrap_or_default();
        line!(
            event_type = event.event_type.as_str(),
            event_id = %event.id,
            builder = %event.builder.name,
            event = %document,
            "{summary}"
        );
    } else {
        line!(event_id = %event.id, "{summary}");
    }
}

#[cfg(test)]
mod tests {
    use builder_monitor_core::event::example_builder_changed as changed;

    use super::*;

    /// A log sink the test can read back.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// `LOG_DOCUMENTS` is one flag for the process: tests that set it take turns, or one test's
    /// `false` lands in the middle of another's JSON line.
    static LOG_DOCUMENTS_TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn logged(level: tracing::Level, json: bool, event: &Event) -> String {
        let _turn = LOG_DOCUMENTS_TURN.lock().unwrap_or_else(|e| e.into_inner());
        let sink = Captured::default();
        let writer = sink.clone();
        let builder =
            tracing_subscriber::fmt().with_max_level(level).with_ansi(false).with_writer(move || writer.clone());
        log_documents(json);
        if json {
            tracing::subscriber::with_default(builder.json().flatten_event(true).finish(), || log(event));
        } else {
            tracing::subscriber::with_default(builder.finish(), || log(event));
        }
        log_documents(false);
        String::from_utf8(sink.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn an_event_logs_one_short_line_and_its_document_only_in_json_or_at_debug() {
        let e = changed();
        let document = serde_json::to_string(&e).unwrap();
        assert!(document.len() > 500);
        let text = logged(tracing::Level::INFO, false, &e);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains(" INFO builder_monitor_core::event: builder.changed paketo-jammy-base: rebuild — paketo-buildpacks/java 18.1.0 → 18.2.0; planned: rebuild petclinic"), "{text}");
        assert!(text.contains(&format!("event_id={}", e.id)), "{text}");
        assert!(!text.contains("\"previous\"") && text.len() < 250, "no document at INFO: {text}");

        let debug = logged(tracing::Level::DEBUG, false, &e);
        assert!(debug.contains("\"previous\""), "the document at debug: {debug}");

        let json = logged(tracing::Level::INFO, true, &e);
        let line: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        assert_eq!(line["message"], e.summary());
        assert_eq!(line["event_type"], "builder.changed");
        assert_eq!(line["event_id"], e.id);
        let back: Event = serde_json::from_str(line["event"].as_str().unwrap()).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn check_failed_and_recovered_are_debug_every_other_event_info() {
        let mut e = changed();
        for t in EventType::ALL {
            e.event_type = t;
            let text = logged(tracing::Level::INFO, false, &e);
            let debug = logged(tracing::Level::DEBUG, false, &e);
            if matches!(t, EventType::CheckFailed | EventType::CheckRecovered) {
                assert!(text.is_empty(), "{t}: {text}");
                assert!(debug.contains(" DEBUG builder_monitor_core::event: "), "{t}: {debug}");
            } else {
                assert!(text.contains(" INFO builder_monitor_core::event: "), "{t}: {text}");
            }
        }
    }
}

//! The `builder-monitor` command: argument parsing, logging set-up and exit codes
//! (0 ok, 1 runtime failure, 2 usage or invalid config).
#![deny(unsafe_code)]

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use builder_monitor::{install_crypto_provider, log_stream};
use builder_monitor_core::text;
use commands::{Command, Failure, error_text, execute};

mod cli;
mod commands;

use cli::{Cli, LogFormat};

/// A usage error (or `--help`, `--version`) as clap prints it; a missing `--config` also names
/// the variable that can stand for it.
fn usage(err: clap::Error) -> ExitCode {
    let config_missing =
        err.kind() == clap::error::ErrorKind::MissingRequiredArgument && err.render().to_string().contains("--config");
    let _ = err.print();
    if config_missing {
        log_stream::line("\ntip: pass --config FILE, or set BUILDER_MONITOR_CONFIG to the config file's path\n");
    }
    ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2))
}

fn main() -> ExitCode {
    builder_monitor::memory::use_one_malloc_arena();
    install_crypto_provider();
    let cli = match Cli::<Command>::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage(err),
    };
    // A rollback's one line (its `image.rolled_back`) is logged wherever it runs, as the daemon
    // logs it; so is each removal `referrers orphans --delete` makes.
    let logged = matches!(cli.command, Command::Run(_) | Command::Rollback(_) | Command::Referrers(_));
    let default_level = if logged { "info" } else { "warn" };
    // Everything the process writes to stderr from here on goes through the log stream, which
    // never blocks or panics on a closed or full stderr (see `log_stream`).
    let logs = match log_stream::init() {
        Ok(logs) => logs,
        Err(e) => {
            log_stream::line(&format!("error: cannot start the log writer thread: {e}\n"));
            return ExitCode::from(1);
        }
    };
    init_logging(logs, cli.log_format, default_level);
    let code = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => match runtime.block_on(execute(cli.command)) {
            Ok(code) => code,
            Err(Failure { code, error }) => {
                // Errors may carry a registry's words; the lines are ours, other controls are escaped.
                log_stream::line(&format!("error: {}\n", text::escape_keep_newlines(&error_text(&error))));
                code
            }
        },
        Err(e) => {
            log_stream::line(&format!("error: cannot start the async runtime: {e}\n"));
            1
        }
    };
    // Output lost to a full disk is a failure, though the command's work succeeded.
    let code = if code == 0 && commands::out::failed() { 1 } else { code };
    log_stream::flush();
    ExitCode::from(code)
}

fn init_logging(logs: log_stream::LogStream, format: LogFormat, default_level: &str) {
    use tracing_subscriber::field::MakeExt;
    let filter = EnvFilter::try_from_env("BUILDER_MONITOR_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    // Colour codes are noise in a file, a pipe or a log collector (and our own would be
    // indistinguishable from injected ones); NO_COLOR (no-color.org) wins.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(logs)
        .with_ansi(ansi)
        // Our writer never fails; were it to, the report would be an `eprintln!`, which panics.
        .log_internal_errors(false);
    match format {
        // Field values can carry registry strings: a newline or escape sequence in a buildpack id
        // must not forge a log line or repaint the terminal (JSON lines escape them already).
        LogFormat::Text => builder
            .fmt_fields(
                tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
                    let rendered = format!("{value:?}");
                    match field.name() {
                        "message" => write!(writer, "{}", text::escape(&rendered)),
                        name => write!(writer, "{name}={}", text::escape(&rendered)),
                    }
                })
                .delimited(" "),
            )
            .init(),
        LogFormat::Json => {
            builder_monitor::event_log::log_documents(true);
            builder.json().flatten_event(true).with_current_span(false).init()
        }
    }
}

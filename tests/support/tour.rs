//! The offline tour (`scripts/tour`, `examples/tour.rs`; checked by `tests/tour.rs`): a local
//! registry with a synthetic CNB builder, its run image and two apps built on it; the daemon
//! watching them with a webhook to a local receiver and registry rebases in two waves; then the run
//! image and the builder move, so a newcomer sees a pin, a classified move, alerts, rebases in the
//! registry and the page, with nothing from the internet.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::app::{self, App, RunImage};
use super::cnb::BuilderSpec;
use super::images::{Format, Pusher};
use super::receiver::Receiver;
use super::registry::TestRegistry;

/// How long the tour waits for one step before it gives up, saying which.
const STEP: Duration = Duration::from_secs(60);

/// What the tour saw, for the test that runs it.
#[derive(Debug, Default)]
pub struct Seen {
    pub page: String,
    pub alerts: Vec<String>,
    pub rebased: Vec<String>,
    pub rebuilds_planned: Vec<String>,
    /// `rollback storefront` through the running daemon: the tag's move back, from → to.
    pub rolled_back: Option<(String, String)>,
    /// The line the tour prints that puts the binary on `PATH` (`export PATH="DIR:$PATH"`).
    pub path_line: String,
    /// Who the rollback's `image.rolled_back` alert says asked for it.
    pub rolled_back_by: Option<String>,
    /// `freeze` then `unfreeze` through the running daemon: the freeze `status` showed between.
    pub frozen_reason: Option<String>,
    /// Everything shown to people: the tour's own lines (`tour`), and the output of each command
    /// it ran for people (`builder-monitor rollback …`, `status`, `plan`, `check`), stdout and stderr.
    pub human: Vec<(String, String)>,
}

impl Seen {
    /// Prints a line of the tour, and keeps it.
    fn say(&mut self, text: &str) {
        say(text);
        self.human.push(("tour".into(), text.to_string()));
    }

    /// Runs `bin` with `args` for people (no `--json`), keeping what it showed; its stdout.
    fn run_for_people(
        &mut self,
        bin: &Path,
        dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<String, String> {
        let mut command = Command::new(bin);
        command.args(args).current_dir(dir).env_remove(TOKEN_ENV);
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.output().map_err(|e| format!("{}: {e}", bin.display()))?;
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        self.human.push((format!("builder-monitor {}", args.join(" ")), format!("{stdout}{stderr}")));
        if !out.status.success() {
            return Err(format!("builder-monitor {}: {stderr}", args.join(" ")));
        }
        Ok(stdout.into_owned())
    }
}

/// The variable the tour's config names for the daemon's API token, and what the tour sets it to.
const TOKEN_ENV: &str = "BUILDER_MONITOR_API_TOKEN";

/// The daemon, stopped when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        let _ = self.0.wait();
    }
}

fn say(text: &str) {
    println!("{text}");
    let _ = std::io::stdout().flush();
}

/// Runs `bin` (the builder-monitor binary) with `args`, its output as text.
fn cli(bin: &Path, dir: &Path, args: &[&str]) -> Result<String, String> {
    cli_with(bin, dir, args, &[])
}

/// [`cli`] with environment variables (the API token a write through the daemon needs).
fn cli_with(bin: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let mut command = Command::new(bin);
    command.args(args).current_dir(dir).env_remove(TOKEN_ENV);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().map_err(|e| format!("{}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!("builder-monitor {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn status(bin: &Path, dir: &Path) -> Result<Value, String> {
    let text = cli(bin, dir, &["status", "--json", "--config", "config.toml"])?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// Waits until `found` answers from the daemon's status, polling it (a tool's wait, with a limit).
async fn until<T>(bin: &Path, dir: &Path, what: &str, found: impl Fn(&Value) -> Option<T>) -> Result<T, String> {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        if let Some(t) = found(&status(bin, dir)?) {
            return Ok(t);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "the tour waited {}s for {what}; the daemon's log is {}/daemon.log",
                STEP.as_secs(),
                dir.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The address the daemon's server bound, from its JSON log.
async fn server_addr(dir: &Path) -> Result<String, String> {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
        if let Some(addr) = log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find_map(|v| {
            (v["message"] == "serving health, metrics, API and hooks")
                .then(|| v["listen"].as_str().map(str::to_string))
                .flatten()
        }) {
            return Ok(addr);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("the daemon did not start serving; its log:\n{log}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min("sha256:".len() + 12)]
}

/// The tour in `dir`, with the daemon `bin`. With `stay`, it waits for Ctrl-C at the end, the
/// daemon serving the page; otherwise it stops the daemon and answers what it saw.
pub async fn run(bin: &Path, dir: &Path, stay: bool) -> Result<Seen, String> {
    builder_monitor::install_crypto_provider();
    let mut seen = Seen::default();
    seen.say("builder-monitor tour: a registry, a builder, two apps and the daemon, all on this machine.\n");
    let registry = TestRegistry::start();
    let host = registry.host.clone();
    let pusher = Pusher::new(&host);
    let run_tag = format!("{host}/cnb/run:latest");
    let run_v1 = RunImage::jammy("1", 3);
    let run = app::push_run(&pusher, "cnb/run", Some("latest"), &run_v1, Format::Oci).await;
    let builder = BuilderSpec::jammy(&run_tag);
    pusher.push_image("cnb/builder", Some("latest"), &builder.image(), Format::Oci).await;
    let apps = [("storefront", 0), ("orders", 1)];
    for (name, _) in apps {
        let app = App::on(&run_v1, &run_tag, &format!("{host}/cnb/run@{}", run.digest)).label("app", name);
        app::push_app(&pusher, &format!("shop/{name}"), Some("latest"), &app, Format::Oci).await;
    }
    seen.say(&format!(
        "1. A registry at {host} (Debian's docker-registry) holds a CNB builder ({host}/cnb/builder:latest),"
    ));
    seen.say("   its run image (cnb/run:latest) and two apps built on it (shop/storefront, shop/orders).");

    let receiver = Receiver::start().await;
    let mut images = String::new();
    for (name, wave) in apps {
        images += &format!(
            "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/shop/{name}:latest\"\nwave = {wave}\n\n"
        );
    }
    let config = format!(
        "# Written by the builder-monitor tour.\n\
         [monitor]\nstate = \"state.db\"\ninterval = \"2s\"\njitter = \"0s\"\n\n\
         [server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"{TOKEN_ENV}\"\n\n\
\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/cnb/builder:latest\"\n\n{images}\
         [runner]\nrebase = \"registry\"\n\n\
         [[alerts]]\nname = \"tour\"\ntype = \"webhook\"\nurl = \"{}\"\nevents = [\"*\"]\n",
        receiver.url
    );
    std::fs::write(dir.join("config.toml"), &config).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join("daemon.log")).map_err(|e| e.to_string())?;
    // A token of this run's own: the write half (rollback, freeze) goes through the API.
    let token = format!("tour-{:016x}", rand::random::<u64>());
    let child = Command::new(bin)
        .args(["run", "--config", "config.toml", "--log-format", "json"])
        .env(TOKEN_ENV, &token)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let daemon = Running(child);
    let addr = server_addr(dir).await?;
    // The commands reach the running daemon at the config's `listen`: the port the system chose
    // goes into the file (the daemon keeps what it bound; nothing races for a port).
    let bound = config.replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{addr}\""));
    std::fs::write(dir.join("config.toml"), bound).map_err(|e| e.to_string())?;
    let page = format!("http://{addr}/");
    seen.say(&format!("2. The daemon watches them: config {}/config.toml, page {page},", dir.display()));
    seen.say(&format!("   alerts to a webhook at {}.", receiver.url));
    let pin =
        until(bin, dir, "the builder's pin", |s| s["builders"][0]["pinned"]["digest"].as_str().map(str::to_string))
            .await?;
    seen.say(&format!("   ✔ builder jammy pinned to {}; its run image is watched too.", short(&pin)));

    seen.say("\n3. The run image moves (a patched base layer), as publishers move it every week.");
    app::push_run(&pusher, "cnb/run", Some("latest"), &RunImage::jammy("2", 4), Format::Oci).await;
    let summary = until(bin, dir, "the run image's move", |s| {
        s["run_images"][0]["changes"][0]["summary"].as_str().map(str::to_string)
    })
    .await?;
    seen.say(&format!("   ✔ classified: {summary}"));
    seen.page = page.clone();
    for (name, wave) in apps {
        let moved = until(bin, dir, &format!("{name}'s rebase"), |s| {
            let image = s["images"].as_array()?.iter().find(|i| i["name"] == name)?;
            let mv = image["moves"].as_array()?.first()?;
            Some(format!("{} → {}", short(mv["previous"].as_str()?), short(mv["digest"].as_str()?)))
        })
        .await?;
        seen.say(&format!("   ✔ {name} (wave {wave}) rebased in the registry: {moved}"));
        seen.rebased.push(name.to_string());
    }

    seen.say("\n4. The builder moves (a buildpack bump): an app built with the old version needs a rebuild.");
    let bumped = builder.clone().bump("paketo-buildpacks/java", "18.2.0");
    pusher.push_image("cnb/builder", Some("latest"), &bumped.image(), Format::Oci).await;
    let change = until(bin, dir, "the builder's move", |s| {
        s["builders"][0]["changes"][0]["summary"].as_str().map(str::to_string)
    })
    .await?;
    seen.say(&format!("   ✔ classified: {change}"));
    let planned = until(bin, dir, "the planned rebuilds", |s| {
        let rebuilds: Vec<String> = s["pending"]
            .as_array()?
            .iter()
            .filter(|a| a["action"] == "rebuild")
            .filter_map(|a| a["image"].as_str().map(str::to_string))
            .collect();
        (rebuilds.len() == apps.len()).then_some(rebuilds)
    })
    .await?;
    seen.say(&format!(
        "   ✔ rebuilds recorded for {} ([runner] type \"none\": planned, never run)",
        planned.join(" and ")
    ));
    seen.rebuilds_planned = planned;

    let deadline = tokio::time::Instant::now() + STEP;
    while receiver.received().iter().all(|r| r.header("x-builder-monitor-event") != Some("builder.changed")) {
        if tokio::time::Instant::now() > deadline {
            return Err("the webhook never heard of the builder's move".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen.alerts =
        receiver.received().iter().filter_map(|r| r.header("x-builder-monitor-event").map(str::to_string)).collect();
    seen.say(&format!("\n5. The webhook received {} alerts: {}.", seen.alerts.len(), seen.alerts.join(", ")));

    seen.say("\n6. Undo, through the running daemon: storefront's tag goes back to its digest before the rebase.");
    let auth = [(TOKEN_ENV, token.as_str())];
    seen.run_for_people(bin, dir, &["rollback", "storefront", "--config", "config.toml"], &auth)?;
    let back = until(bin, dir, "storefront's rollback", |s| {
        let image = s["images"].as_array()?.iter().find(|i| i["name"] == "storefront")?;
        let mv = image["moves"].as_array()?.first().filter(|m| m["kind"] == "rollback")?;
        Some((mv["previous"].as_str()?.to_string(), mv["digest"].as_str()?.to_string()))
    })
    .await?;
    seen.say(&format!("   ✔ builder-monitor rollback storefront: {} → {}", short(&back.0), short(&back.1)));
    seen.rolled_back = Some(back);
    let alert = tokio::time::timeout(STEP, receiver.wait_for_body("image.rolled_back"))
        .await
        .map_err(|_| "the webhook never heard of the rollback".to_string())?
        .json();
    seen.rolled_back_by = alert["rolled_back"]["by"].as_str().map(str::to_string);
    seen.say(&format!(
        "   ✔ the webhook heard image.rolled_back, by {}",
        seen.rolled_back_by.as_deref().unwrap_or("?")
    ));
    seen.run_for_people(bin, dir, &["freeze", "--reason", "tour: a change window", "--config", "config.toml"], &auth)?;
    let reason =
        until(bin, dir, "the freeze", |s| s["rollout"]["frozen"]["reason"].as_str().map(str::to_string)).await?;
    seen.say(&format!("   ✔ builder-monitor freeze: nothing starts until unfreeze (\"{reason}\" on the page)"));
    seen.frozen_reason = Some(reason);
    seen.run_for_people(bin, dir, &["unfreeze", "--config", "config.toml"], &auth)?;
    until(bin, dir, "the unfreeze", |s| s["rollout"]["frozen"].is_null().then_some(())).await?;
    seen.say("   ✔ builder-monitor unfreeze");
    // What a newcomer runs next, for the record of what people are shown (not printed here).
    for command in ["status", "plan", "check"] {
        seen.run_for_people(bin, dir, &[command, "--config", "config.toml"], &auth)?;
    }

    seen.say(&format!("\nThe page shows all of it: {page}"));
    // The binary is not on PATH after a build: the commands below work as pasted after this line.
    let bin_dir = bin.parent().map(|d| d.display().to_string()).unwrap_or_else(|| ".".into());
    seen.say(&format!("\nThe binary is {}; to run the commands below as they are:", bin.display()));
    seen.path_line = format!("export PATH=\"{bin_dir}:$PATH\"");
    seen.say(&format!("   {}", seen.path_line));
    seen.say(&format!("`builder-monitor status --config {}/config.toml` says the same in text.", dir.display()));
    if stay {
        seen.say("\nTry the write half yourself while the tour runs (the daemon's API needs its token):");
        seen.say(&format!("   export {TOKEN_ENV}={token}"));
        let config = format!("--config {}/config.toml", dir.display());
        seen.say(&format!("   builder-monitor rollback orders {config}"));
        seen.say(&format!("   builder-monitor freeze --reason 'my change window' {config}   # then: unfreeze"));
        seen.say("The registry and the daemon keep running for you to look around; Ctrl-C ends the tour.");
        let _ = tokio::signal::ctrl_c().await;
    }
    drop(daemon);
    drop(registry);
    Ok(seen)
}

/// The tour's working directory: `dir` made absolute (created when missing).
pub fn workdir(dir: Option<PathBuf>) -> Result<PathBuf, String> {
    let dir = match dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("builder-monitor-tour-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    dir.canonicalize().map_err(|e| e.to_string())
}

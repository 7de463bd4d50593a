//! `referrers orphans`: the signatures, attestations, bundle referrers and referrers tag indexes
//! our key wrote for digests that no tag of the app repositories reaches any more (a rebase moved
//! the tag on); listed, and removed only with `--delete`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::Context;

use super::common::{load_config, signing_service};
use super::failure::{Failure, usage};
use builder_monitor::config::{Config, Secrets};
use builder_monitor::daemon::{self, Access};
use builder_monitor::ledger::Ledger;
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor::schedule::Clock;
use builder_monitor::signing::orphans::{self, RepositoryOrphans};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::text;

/// Tag moves read from the ledger for the digests we wrote (newest first).
const MOVES_READ: usize = 100_000;

/// What we attached to digests through the referrers forms.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: ReferrersCommand,
}

#[derive(clap::Subcommand)]
enum ReferrersCommand {
    /// List signatures, bundles and referrers indexes our key wrote for digests no tag reaches
    ///
    /// The `.sig`/`.att` manifests, Sigstore bundle referrers and referrers tag indexes that
    /// `[signing]`'s key wrote for digests no tag of an `[[images]]` repository reaches any more;
    /// with --delete, remove those that hold only what our key signed (the others are listed as
    /// kept and never removed).
    Orphans {
        /// The config file (TOML; see docs/configuration.md).
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        /// Remove what is listed as ours (manifest DELETE by digest; the registry must allow it).
        #[arg(long)]
        delete: bool,
        /// Print JSON instead of text (fields are added, never renamed).
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { command: ReferrersCommand::Orphans { config: path, delete, json } } = args;
    let config = load_config(&path, Secrets::Registries)?;
    let signing = signing_service(&path, &config)?;
    let Some(signer) = signing.as_ref().and_then(|s| s.signer()) else {
        return Err(usage(anyhow::anyhow!(
            "{}: no key to recognise our signatures by: add a [signing] table with key = \"PATH\" (or key_env = \"VAR\")",
            path.display()
        )));
    };
    let ledger = daemon::open_ledger(&config, Access::Read, &Clock::System).await?;
    if delete {
        refuse_while_running(&ledger).await?;
    }
    let (known, exclude) = ledger_digests(&ledger).await?;
    let registry = Registry::new(config.registries.values().cloned(), Metrics::new()).actions();
    let ours = signer.verifier();
    let mut report = Vec::new();
    for (repository, image) in repositories(&config) {
        let known = known.get(&repository).cloned().unwrap_or_default();
        let mut found = orphans::find(&registry, &image, &ours, &known, &exclude).await?;
        if delete {
            let done = orphans::delete(&registry, &image, &mut found).await;
            report.push(found);
            if let Err(err) = done {
                print_report(&report, delete, json)?;
                return Err(err.into());
            }
        } else {
            report.push(found);
        }
    }
    print_report(&report, delete, json)?;
    Ok(0)
}

/// A rebase signs its new digest before its tag moves there: while one runs, that digest looks
/// orphaned. Removing is refused then; listing is not.
async fn refuse_while_running(ledger: &Ledger) -> Result<(), Failure> {
    let running = ledger.running_actions().await?;
    if !running.is_empty() {
        return Err(anyhow::anyhow!(
            "{} actions are running (a rebase signs its new digest before its tag moves there, so that digest looks orphaned meanwhile): nothing removed; run --delete again when they are done",
            running.len()
        )
        .into());
    }
    Ok(())
}

/// The digests the ledger says we wrote, by `registry/repository`, and those a tag write in
/// progress is about to tag (never taken for orphans).
async fn ledger_digests(ledger: &Ledger) -> Result<(BTreeMap<String, BTreeSet<String>>, BTreeSet<String>), Failure> {
    let mut known: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for moved in ledger.tag_moves(None, MOVES_READ).await? {
        let Ok(image) = ImageRef::parse(&moved.reference) else { continue };
        let repository = format!("{}/{}", image.registry(), image.repository());
        known.entry(repository).or_default().extend(moved.after.into_iter().chain(moved.before));
    }
    let mut exclude = BTreeSet::new();
    for intent in ledger.tag_intents().await? {
        exclude.extend(intent.expected.into_iter().chain(intent.new));
    }
    Ok((known, exclude))
}

/// The `[[images]]` repositories, each once, as `registry/repository` and a reference into it.
fn repositories(config: &Config) -> BTreeMap<String, ImageRef> {
    config
        .images
        .iter()
        .map(|i| (format!("{}/{}", i.image.registry(), i.image.repository()), i.image.clone()))
        .collect()
}

fn print_report(report: &[RepositoryOrphans], delete: bool, json: bool) -> Result<(), Failure> {
    if json {
        let doc = serde_json::json!({ "delete": delete, "repositories": report });
        outln!("{}", serde_json::to_string_pretty(&doc).context("encoding JSON")?);
        return Ok(());
    }
    let (mut ours, mut kept, mut removed) = (0, 0, 0);
    for repository in report {
        let api = match repository.referrers_api {
            Some(true) => ", referrers API",
            Some(false) => ", referrers tag schema",
            None => "",
        };
        outln!(
            "{}: {} tags reach {} digests{api}; {} digests no tag reaches carry artifacts of ours",
            text::fit(&repository.repository, text::LINE / 2),
            repository.tags,
            repository.reached,
            repository.orphans.len()
        );
        for orphan in &repository.orphans {
            outln!("  {}:", text::short_reference(&orphan.digest));
            for artifact in &orphan.artifacts {
                let name = artifact.tag.as_deref().unwrap_or(&artifact.digest);
                let state = match (&artifact.kept, artifact.deleted) {
                    (Some(why), _) => format!("kept: {why}"),
                    (None, true) => "removed".to_string(),
                    (None, false) => "ours".to_string(),
                };
                let line = format!("{:<16} {} ({state})", artifact.kind.as_str(), short_name(name));
                outln!("    {}", text::fit(&line, text::LINE - 4));
                match (&artifact.kept, artifact.deleted) {
                    (Some(_), _) => kept += 1,
                    (None, true) => removed += 1,
                    (None, false) => ours += 1,
                }
            }
        }
    }
    match (delete, ours + removed) {
        (_, 0) => outln!("nothing of ours is attached to a digest no tag reaches"),
        (true, _) => outln!("removed {removed} artifacts of ours; {kept} kept (another signer's content is in them)"),
        (false, n) => outln!(
            "{n} artifacts of ours could be removed (run again with --delete); {kept} kept (another signer's content is in them)"
        ),
    }
    Ok(())
}

/// A digest, or an attachment tag (`sha256-<hex>.sig`), shortened to 12 hex digits.
fn short_name(name: &str) -> String {
    match name.strip_prefix("sha256-") {
        Some(rest) if rest.len() >= 64 => format!("sha256-{}…{}", &rest[..12], &rest[64..]),
        _ => text::short_digests(name).into_owned(),
    }
}

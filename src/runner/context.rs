//! What a carrier works with while it carries out an attempt, instead of the whole runner: the
//! config, the ledger (where an attempt records its progress), the clock, the registry client's
//! actions' view, the scrubber of secrets, the signing service, and the override guard's index of
//! what deploys wrote. The runner owns one and hands it to every carrier; a test builds one
//! over a temporary ledger ([`Context::new`]). Its behaviour lives beside the code that uses it
//! (`attempt`, `build_signing`, `registry_rebase`, `deploy`).

use std::sync::{Arc, Mutex};

use super::secrets::Secrets;
use crate::config::{Config, RebasePath};
use crate::ledger::Ledger;
use crate::registry::Registry;
use crate::schedule::Clock;
use crate::signing::SigningService;
use builder_monitor_core::deploy::OverrideIndex;

/// The narrow core of the runner a carrier sees (see the module doc).
pub struct Context {
    pub(super) config: Arc<Config>,
    /// Where attempts record their progress, tag writes and outcomes.
    pub(super) ledger: Ledger,
    pub(super) clock: Clock,
    /// The registry client's actions' view: reads app tags' digests, writes registry rebases.
    pub(super) registry: Arc<Registry>,
    /// Every secret value the config holds: no output, error or event may show one.
    pub(super) secrets: Secrets,
    /// `[signing]` with its key: builds and registry rebases sign with it, the gate checks with it.
    pub(super) signing: Option<Arc<SigningService>>,
    /// What each succeeded deploy wrote, for the override guard (`deploy::guard`).
    pub(super) guarded: Mutex<OverrideIndex>,
    /// Where rebases run (the runner's backend, or the registry), as their events say.
    pub(super) rebase_path: RebasePath,
}

impl Context {
    /// A context over `config`'s secrets, writing through `registry` (an actions' view is taken
    /// of it) and signing with `signing`.
    pub fn new(
        config: Arc<Config>,
        ledger: Ledger,
        clock: Clock,
        registry: &Registry,
        signing: Option<Arc<SigningService>>,
    ) -> Self {
        let secrets = Secrets::of(&config);
        let rebase_path = config.runner.carrier(builder_monitor_core::plan::ActionKind::Rebase).path;
        Context {
            config,
            ledger,
            clock,
            registry: Arc::new(registry.actions()),
            secrets,
            signing,
            guarded: Default::default(),
            rebase_path,
        }
    }
}

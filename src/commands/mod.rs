//! The commands behind the CLI, one file each: its arguments (clap), loading what it needs,
//! calling the library and printing. This module only registers them; errors carry the exit
//! code (2 for usage and invalid config, 1 for runtime failures).

#[macro_use]
pub mod out;
mod common;
mod daemon_api;
mod digests;
mod failure;
mod rollout;

mod alert;
mod approve;
mod build_spec;
mod check;
mod crd;
mod deploy;
mod diff;
mod freeze;
mod plan;
mod rbac;
mod rebase;
mod referrers;
mod reject;
mod release;
mod resolve;
mod rollback;
mod run;
mod signing;
mod status;
mod unfreeze;

pub use failure::{Failure, error_text};

/// Declares the commands: `Name(module)` is `builder-monitor name` (kebab-case), parsed into
/// `module::Args` (whose doc comment is its help) and carried out by `module::run`. The order is
/// the help's.
macro_rules! commands {
    ($($name:ident($module:ident)),* $(,)?) => {
        // No doc comment here: on a subcommand enum it would replace the program's `about`.
        #[derive(clap::Subcommand)]
        pub enum Command {
            $($name($module::Args)),*
        }

        /// Carries out the command.
        pub async fn execute(command: Command) -> Result<u8, Failure> {
            match command {
                $(Command::$name(args) => $module::run(args).await),*
            }
        }
    };
}

commands! {
    Run(run),
    Check(check),
    Resolve(resolve),
    Diff(diff),
    Rebase(rebase),
    Plan(plan),
    BuildSpec(build_spec),
    Crd(crd),
    Rbac(rbac),
    Alert(alert),
    Rollback(rollback),
    Deploy(deploy),
    Approve(approve),
    Reject(reject),
    Release(release),
    Freeze(freeze),
    Unfreeze(unfreeze),
    Status(status),
    Signing(signing),
    Referrers(referrers),
}

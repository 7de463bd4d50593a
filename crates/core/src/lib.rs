//! builder-monitor's pure core: image references, CNB metadata and `classify`, `plan`, events, schedules,
//! package diffs, the roll-out gate and GitOps file edits. No I/O crate is a dependency, so none can creep in.

#![forbid(unsafe_code)]

pub mod cnb;
pub mod deploy;
pub mod event;
pub mod gitops;
pub mod id;
pub mod kind;
pub mod pace;
pub mod packages;
pub mod plan;
pub mod pool;
pub mod progress;
pub mod rebase;
pub mod reference;
pub mod rollout;
pub mod schedule;
pub mod signing;
pub mod template;
pub mod text;
pub mod vulns;

//! builder-monitor's pure core: image references, CNB metadata and `classify`, `plan`, events and
//! their stable ids, schedules, OS package lists and their diff. No I/O crate is a dependency.

pub mod cnb;
pub mod event;
pub mod packages;
pub mod plan;
pub mod rebase;
pub mod reference;
pub mod schedule;
pub mod text;

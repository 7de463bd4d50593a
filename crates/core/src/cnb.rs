//! CNB builder and app images as their config labels describe them, and `classify`, which decides
//! what a builder move means for app images (rebase, rebuild, unknown, none). Pure: no I/O.

mod app;
mod change;
mod classify;
mod explain;
mod fixes;
mod limits;
mod model;
mod parse;
mod run_image;

pub use app::*;
pub use change::*;
pub use classify::{classify, describe};
pub use explain::{Explanation, explain};
pub use fixes::{fixes_of, package_names, releases_of};
pub use limits::{MAX_ENTRIES, MAX_LABEL_BYTES, MAX_PINNED_BYTES, json_size};
pub use model::*;
pub use parse::{parse_builder, platform_metadata};
pub use run_image::{base_release, classify_run_image, is_base_image};

pub const BUILDER_METADATA: &str = "io.buildpacks.builder.metadata";
pub const STACK_ID: &str = "io.buildpacks.stack.id";
pub const STACK_MIXINS: &str = "io.buildpacks.stack.mixins";
pub const BUILDPACK_ORDER: &str = "io.buildpacks.buildpack.order";
pub const BUILDPACK_LAYERS: &str = "io.buildpacks.buildpack.layers";
pub const LIFECYCLE_VERSION: &str = "io.buildpacks.lifecycle.version";
pub const LIFECYCLE_APIS: &str = "io.buildpacks.lifecycle.apis";
pub const LIFECYCLE_METADATA: &str = "io.buildpacks.lifecycle.metadata";
pub const BUILD_METADATA: &str = "io.buildpacks.build.metadata";
const BASE_PREFIX: &str = "io.buildpacks.base.";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("image config is not valid JSON: {0}")]
    Config(String),
    #[error("label {label} is malformed: {detail}")]
    Label { label: &'static str, detail: String },
    /// Kept as this note instead of the metadata itself.
    #[error("metadata over the size limits, not kept: {0}")]
    OverLimit(String),
}

#[cfg(test)]
mod tests;

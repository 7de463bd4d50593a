//! Signatures written to registries next to the images they sign: the Sigstore bundle form
//! (cosign v3's default) as an OCI 1.1 referrer of the signed digest ([`bundle`]). The bytes are the
//! core's (`builder_monitor_core::signing`); the requests are the registry client's.

pub mod bundle;

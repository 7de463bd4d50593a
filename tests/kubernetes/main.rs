//! Integration tests on the Kubernetes API double: the double itself, the Kubernetes runners and
//! pools, deploys, and both ledgers (SQLite and ConfigMaps) under the same operations; and, on the
//! real control plane (`support::control_plane`, one per run of this binary), deploys the double
//! cannot show (`real_deploy`, `terminating_namespace`), over every workload kind
//! (`real_workloads`), the runner's Jobs (`real_jobs`), kpack Builds (`real_kpack`) and a Job
//! Kueue evicts (`real_kueue`; `real_world` is the deploy tests' shared world), and exact rights: the daemon and
//! `check --online` under what `builder-monitor rbac` prints, and less (`exact_rbac`,
//! `online_access`), and the ClusterBuilders the daemon publishes under the CRD it prints
//! (`cluster_builders`), under the RBAC the Helm chart renders (`chart_rbac`), the ConfigMap
//! ledger's racing writers and read-back (`real_ledger`) and its fence by leadership (`ledger_fence`, on the double), a leader's Lease taken by a
//! conflicting write (`lease_conflict`), a killed leader's fleet of rebases taken over exactly once
//! (`leader_failover`), rights taken from the running daemon and given back — a deploy's, a build Job's (`revoked_right`), and
//! those of its own state: the ledger's ConfigMaps, the Lease, ClusterBuilder status (`revoked_state`), a
//! fleet's roll-out in waves and the daemon's requests per workload (`fleet_deploys`); on
//! a second control plane without the watch cache for ConfigMaps, the
//! runner's watch across a broken-off watch and a 410 Gone (`resumed_watches`); the daemon's watch
//! settings across the server's own timeout and a bookmark past a compaction
//! (`server_ended_watches`); the requests and time of a start over a ledger of many watches
//! (`ledger_start`).
//!
//! Each file below was a test binary of its own; grouped, they compile `tests/support` and link the
//! crate once. They share one process and run as its threads: a test here changes no process state
//! (environment, working directory, signal handlers, a global subscriber, resource limits) and
//! measures only its children, never this process.

#[path = "../support/mod.rs"]
mod support;

mod chart_rbac;
mod cluster_builders;
mod deploy;
mod exact_rbac;
mod fleet_deploys;
mod kube_double;
mod kubernetes;
mod leader_failover;
mod lease_conflict;
mod ledger;
mod ledger_concurrency;
mod ledger_fence;
mod ledger_start;
mod online_access;
mod pools;
mod real_deploy;
mod real_jobs;
mod real_kpack;
mod real_kueue;
mod real_ledger;
mod real_workloads;
mod real_world;
mod resumed_watches;
mod revoked_right;
mod revoked_state;
mod server_ended_watches;
mod terminating_namespace;
mod write_ahead;

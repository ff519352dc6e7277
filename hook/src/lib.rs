//! cuda-sandbox-hook: a Nix `pre-build-hook` that exposes NVIDIA GPUs and the driver to builds
//! that declare `requiredSystemFeatures = [ "cuda" ]`, and nothing to any other build.
//!
//! The flow (DESIGN.md §2): [`drv`] reads the derivation's features; [`config`] says which
//! rules answer to them; [`plan`] computes what to expose and why (following [`symlinks`] and
//! store [`closure`]s); the plan is rendered by [`protocol`] for Nix and by [`explain`] for
//! people. [`hook`] ties them together with the failure policy.

pub mod closure;
pub mod config;
pub mod discover;
pub mod drv;
pub mod elfdeps;
pub mod exec;
pub mod explain;
pub mod hook;
pub mod lease;
pub mod log;
pub mod manifest_file;
pub mod plan;
pub mod protocol;
pub mod symlinks;

//! cuda-sandbox-hook: a Nix `pre-build-hook` that exposes NVIDIA GPUs and the driver to builds
//! that declare `requiredSystemFeatures = [ "cuda" ]`, and nothing to any other build.
//!
//! One pipeline ([`pipeline`]), each stage in its module, data flowing one way:
//! 1. [`request`] resolves what is asked: the derivation ([`drv`]), the configuration
//!    ([`config`], trusted like sudoers by the rules of [`trust`]), the matching rules and the
//!    verdict;
//! 2. [`scan`] reads the host into a [`scan::HostView`] (with the helpers in [`discover`] and
//!    [`symlinks`], and the CDI specs of [`cdi`]); it only reads;
//! 3. [`plan`] decides, purely, what to expose and why;
//! 4. [`act`] adds store [`closure`]s, the GPU [`lease`] and the manifest ([`manifest_file`]),
//!    the only steps that change the host, in verified state directories ([`statedir`]);
//! 5. the plan is rendered for Nix ([`protocol`], by [`hook`]), for people ([`explain`]), and
//!    as a private namespace ([`exec`], with [`elfdeps`] for the command's libraries).

// Developer docs, read with --document-private-items (docs/architecture.md): private links resolve.
#![allow(rustdoc::private_intra_doc_links)]

mod act;
mod build_users;
mod bytes;
mod cdi;
pub mod closure;
pub mod config;
mod discover;
pub mod drv;
mod elfdeps;
pub mod exec;
pub mod explain;
mod fit;
pub mod hook;
pub mod lease;
pub mod log;
pub mod manifest_file;
pub mod mig;
mod pipeline;
mod plan;
mod protocol;
pub mod request;
mod scan;
mod slot;
pub mod statedir;
mod symlinks;
mod sysfs;
mod trust;

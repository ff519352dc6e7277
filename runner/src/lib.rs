//! cuda-sandbox-check: proves, from inside a Nix build sandbox (or anywhere), that the
//! NVIDIA GPU and CUDA driver exposed to the process work.
//!
//! A libtest-mimic harness of named checks ([`checks::CHECKS`], each a [`check::Check`]
//! returning a [`check::Outcome`]). The driver is dlopen'd by plain name (`cuda::driver`),
//! never linked, so the dynamic loader's normal search picks it; NVML comes through
//! `nvml-wrapper`. When the hook left a manifest ([`facts::expectations`]), the checks compare
//! the loaded driver with the one it chose. [`facts::elf_lint`] checks a package's ELF files
//! (`cuda-sandbox-check lint`, or the `lint::elf` check). Facts and verdicts end in a JSON
//! report ([`report`]).
//!
//! The library exists for `main.rs`, the integration tests and the bench: an item is `pub` only
//! when one of them uses it (`unreachable_pub` warns on the rest).

// Developer docs, read with --document-private-items (docs/architecture.md): private links resolve.
#![allow(rustdoc::private_intra_doc_links)]
#![warn(unreachable_pub)]

pub mod check;
pub mod checks;
mod cuda;
pub mod facts;
pub mod harness;
pub mod options;
pub mod output;
pub mod report;
pub mod session;

//! cuda-sandbox-hook: a Nix `pre-build-hook` that exposes NVIDIA GPUs to tagged builds.
pub mod drv;

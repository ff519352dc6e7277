//! The runner as the builder of a tagged derivation in a real Nix sandbox, the real hook
//! exposing real character devices (mknod'd under a fake host root) and the REAL NVIDIA 535
//! userspace at /run/opengl-driver/lib: a GPU-shaped host without the kernel module. What
//! needs no GPU passes; what needs one fails naming the missing kernel module, with the advice
//! for a build the hook made (its manifest is there). Needs root, `nix-build` and the
//! libraries of `scripts/nvidia-userspace`; under `CI=true` it fails rather than skips.

use std::path::Path;

use cuda_sandbox_testkit::real_nvidia::{Branch, RealNvidia};
use cuda_sandbox_testkit::{
    builder_sandbox_paths, driver_mount, nix_available, nonce, workspace_binary, FakeHost,
    NixSandbox,
};

const RUNNER: &str = env!("CARGO_BIN_EXE_cuda-sandbox-check");

// The tests, one module per tier (docs/testing.md).
mod sandbox;

//! tests-gpu/device-check, the GPU host script, run here on the fake driver (its CI test):
//! every step must pass and the summary must carry the figures.

use cuda_sandbox_testkit::{root_available, target_profile_dir, workspace_binary};
use std::path::Path;
use std::process::Command;

// The tests, one module per tier (docs/testing.md).
mod root;

//! The fat-binary fixtures, built by NVIDIA's CUDA 13.5 tools, list as cuobjdump 13.5 should:
//! the ground truth of the fat-binary reader's differential test is itself checked here.

use cuda_sandbox_testkit::fatbin_fixtures::{
    build, cuobjdump_list, gpu_names, Fixture, FixtureKind, Listed, ListedKind,
};
use cuda_sandbox_testkit::real_nvidia::{Cudart, RealNvidia};
use std::path::Path;

fn fixture<'a>(fixtures: &'a [Fixture], name: &str) -> &'a Fixture {
    fixtures
        .iter()
        .find(|f| f.path.file_name().is_some_and(|n| n == name))
        .unwrap_or_else(|| panic!("no fixture {name}"))
}

fn count(listed: &[Listed], kind: ListedKind) -> usize {
    listed.iter().filter(|l| l.kind == kind).count()
}

fn archs(listed: &[Listed], kind: ListedKind) -> Vec<&str> {
    listed
        .iter()
        .filter(|l| l.kind == kind)
        .map(|l| l.arch.as_str())
        .collect()
}

/// The kind of the first entry of the first container in a fat-binary file.
fn first_entry_kind(path: &Path) -> u16 {
    let bytes = std::fs::read(path).expect("read fatbin");
    assert_eq!(bytes[..4], 0xBA55_ED50u32.to_le_bytes(), "container magic");
    let header = u16::from_le_bytes([bytes[6], bytes[7]]) as usize;
    u16::from_le_bytes([bytes[header], bytes[header + 1]])
}

// The tests, one module per tier (docs/testing.md).
mod pure;

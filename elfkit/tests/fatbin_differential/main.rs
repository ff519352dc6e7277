//! The fat-binary reader against NVIDIA's `cuobjdump` 13.5, the oracle: on NVIDIA's own files
//! (cuRAND, `libcudadevrt.a` of CUDA 12.9 and 13.0) and on fat binaries NVIDIA's `ptxas` and
//! `fatbinary` 13.5 build from our own PTX (testkit::fatbin_fixtures: every architecture
//! ptxas accepts, 'a' and 'f' variants, each compression mode, concatenated entries, `.so`,
//! `.o`, `.a`, a byte array in `.rodata`). Under `CI=true` a missing cache fails the tests.
//!
//! One difference is by design of cuobjdump, not ours: it names an `sm_100f` cubin `sm_100`
//! (the 'f' lives only in the entry header's flags). So for SASS the variant is compared with
//! what the fixture was built from, and the rest with cuobjdump.

use std::path::Path;

use cuda_sandbox_cuda_facts::Variant;
use cuda_sandbox_elfkit::fatbin::{read_gpu_code, Container, EntryKind, GpuCode, Origin};
use cuda_sandbox_elfkit::map::Mapped;
use cuda_sandbox_testkit::fatbin_fixtures::{self, cuobjdump_list, FixtureKind, ListedKind};
use cuda_sandbox_testkit::real_nvidia::{Cudart, RealNvidia};

/// The containers of the file at `path`, read from a mapping of it (as the runner reads the
/// files it lints).
fn read_file(path: &Path) -> Result<GpuCode, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let map = Mapped::of(&file).map_err(|e| e.to_string())?;
    read_gpu_code(map.bytes()).map_err(|e| e.to_string())
}

/// One line per listed entry: `member kind arch`, arch as cuobjdump names it.
fn as_cuobjdump_names(code: &GpuCode, include: impl Fn(&Origin) -> bool) -> Vec<String> {
    code.containers
        .iter()
        .filter(|c| include(&c.origin))
        .flat_map(|c| {
            c.entries.iter().filter_map(move |e| {
                let kind = match e.kind {
                    EntryKind::Sass => "elf",
                    EntryKind::Ptx => "ptx",
                    _ => return None,
                };
                // cuobjdump drops a cubin's 'f'; PTX keeps it and is named sm_*.
                let mut arch = e.arch;
                if e.kind == EntryKind::Sass && arch.variant == Variant::Family {
                    arch.variant = Variant::Plain;
                }
                let member = c.member.as_deref().unwrap_or("-");
                Some(format!("{member} {kind} {}", arch.sm_name()))
            })
        })
        .collect()
}

/// The containers NVIDIA's `cuobjdump` lists: all but those found by the magic scan.
fn listed_by_cuobjdump(code: &GpuCode) -> impl Iterator<Item = &Container> {
    (code.containers.iter()).filter(|c| !matches!(c.origin, Origin::Scan(_)))
}

fn listed_names(real: &RealNvidia, path: &Path) -> Vec<String> {
    cuobjdump_list(real, path)
        .into_iter()
        .map(|l| {
            let kind = match l.kind {
                ListedKind::Elf => "elf",
                ListedKind::Ptx => "ptx",
            };
            format!("{} {kind} {}", l.member.as_deref().unwrap_or("-"), l.arch)
        })
        .collect()
}

/// The containers the magic scan found, back to back in one `.fatbin` file, as cuobjdump
/// lists them (it lists a bare fat-binary file's containers in order).
fn scanned_as_listed(real: &RealNvidia, file: &Path, code: &GpuCode, dir: &Path) -> Vec<String> {
    let data = std::fs::read(file).unwrap();
    let mut joined = Vec::new();
    for c in code
        .containers
        .iter()
        .filter(|c| matches!(c.origin, Origin::Scan(_)))
    {
        joined.extend_from_slice(&data[c.offset as usize..(c.offset + c.size) as usize]);
        while joined.len() % 8 != 0 {
            joined.push(0);
        }
    }
    if joined.is_empty() {
        return Vec::new();
    }
    let out = dir.join(format!(
        "{}.scanned.fatbin",
        file.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&out, joined).unwrap();
    listed_names(real, &out)
}

fn differences(what: &str, ours: &[String], theirs: &[String]) -> Option<String> {
    if ours == theirs {
        return None;
    }
    let first = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    Some(format!(
        "{what}: we list {} entries, cuobjdump {}; first difference at {first}: ours {:?}, \
         cuobjdump {:?}",
        ours.len(),
        theirs.len(),
        ours.get(first),
        theirs.get(first)
    ))
}

/// Every difference between the reader and cuobjdump on one file: the containers cuobjdump
/// finds itself, and those only the magic scan finds (listed by cuobjdump once cut out).
fn compare(real: &RealNvidia, path: &Path, scratch: &Path) -> (GpuCode, Vec<String>) {
    let code = read_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut diffs = Vec::new();
    let ours = as_cuobjdump_names(&code, |o| !matches!(o, Origin::Scan(_)));
    diffs.extend(differences(
        &path.display().to_string(),
        &ours,
        &listed_names(real, path),
    ));
    let scanned = as_cuobjdump_names(&code, |o| matches!(o, Origin::Scan(_)));
    diffs.extend(differences(
        &format!("{} (scanned containers)", path.display()),
        &scanned,
        &scanned_as_listed(real, path, &code, scratch),
    ));
    (code, diffs)
}

/// Every SASS and PTX payload of `path`, unpacked by the reader, against the files
/// `cuobjdump -xelf all -xptx all` writes for it: the same contents, as multisets (cuobjdump
/// numbers its files its own way), each without the zero bytes that end it (fatbinary pads a
/// stored payload to 8 bytes, and PTX text to a NUL; cuobjdump writes neither).
fn payload_differences(real: &RealNvidia, path: &Path, scratch: &Path) -> Vec<String> {
    use cuda_sandbox_elfkit::fatbin::payload;
    let data = std::fs::read(path).unwrap();
    let code = read_file(path).unwrap();
    let trim = |b: &[u8]| {
        let end = b.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
        b[..end].to_vec()
    };
    let mut ours: Vec<(String, Vec<u8>)> = Vec::new();
    let mut errors = Vec::new();
    let mut room = Vec::new();
    for c in listed_by_cuobjdump(&code) {
        for e in &c.entries {
            let kind = match e.kind {
                EntryKind::Sass => "cubin",
                EntryKind::Ptx => "ptx",
                _ => continue,
            };
            match payload(&data, e, &mut room) {
                Ok(bytes) => ours.push((kind.into(), trim(bytes))),
                Err(err) => errors.push(format!("{}: {err}", path.display())),
            }
        }
    }
    let out = scratch.join(format!("x-{}", path.file_name().unwrap().to_string_lossy()));
    std::fs::create_dir_all(&out).unwrap();
    let run = std::process::Command::new(real.cuobjdump())
        .args(["-xelf", "all", "-xptx", "all"])
        .arg(path)
        .current_dir(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut theirs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&out)
        .unwrap()
        .map(|f| {
            let f = f.unwrap().path();
            let kind = f.extension().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&f).unwrap();
            (kind, trim(&bytes))
        })
        .collect();
    ours.sort();
    theirs.sort();
    if ours.len() != theirs.len() {
        errors.push(format!(
            "{}: {} payloads unpacked, cuobjdump extracts {}",
            path.display(),
            ours.len(),
            theirs.len()
        ));
    } else if let Some(i) = (0..ours.len()).find(|&i| ours[i] != theirs[i]) {
        errors.push(format!(
            "{}: payload {i} ({}, {} bytes) differs from cuobjdump's ({}, {} bytes)",
            path.display(),
            ours[i].0,
            ours[i].1.len(),
            theirs[i].0,
            theirs[i].1.len()
        ));
    }
    errors
}

// The tests, one module per tier (docs/testing.md).
mod pure;

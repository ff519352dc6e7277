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

use cuda_sandbox_elfkit::fatbin::{read_file, EntryKind, GpuCode, Origin, Variant};
use cuda_sandbox_testkit::fatbin_fixtures::{self, cuobjdump_list, FixtureKind, ListedKind};
use cuda_sandbox_testkit::real_nvidia::{Cudart, RealNvidia};

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

#[test]
fn the_reader_lists_what_cuobjdump_lists_on_fat_binaries_built_by_nvidias_tools() {
    let Some(real) = RealNvidia::find(
        "the_reader_lists_what_cuobjdump_lists_on_fat_binaries_built_by_nvidias_tools",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fixtures = fatbin_fixtures::build(&real, &dir.path().join("fixtures"));
    let names = fatbin_fixtures::gpu_names(&real);
    let mut diffs = Vec::new();
    let mut files = 0;
    for fixture in &fixtures {
        if matches!(fixture.kind, FixtureKind::Cubin | FixtureKind::Ptx) {
            continue; // not fat binaries
        }
        files += 1;
        let (code, found) = compare(&real, &fixture.path, dir.path());
        diffs.extend(found);
        let total = code
            .entries()
            .filter(|e| matches!(e.kind, EntryKind::Sass | EntryKind::Ptx))
            .count();
        if total != fixture.images {
            diffs.push(format!(
                "{}: {total} entries read, {} images put in ({})",
                fixture.path.display(),
                fixture.images,
                fixture.what
            ));
        }
        // The variants from the headers, against what the fixture was built from: every
        // image's name, 'a' and 'f' included, exactly once.
        if fixture.images == names.iter().filter(|n| !n.starts_with("lto_")).count() {
            let mut ours: Vec<String> = code.entries().map(|e| e.arch_name()).collect();
            let mut built: Vec<String> = names
                .iter()
                .filter(|n| !n.starts_with("lto_"))
                .cloned()
                .collect();
            ours.sort();
            built.sort();
            if ours != built {
                diffs.push(format!(
                    "{}: architectures {ours:?}, built from {built:?}",
                    fixture.path.display()
                ));
            }
        }
        let compressed: Vec<_> = code.entries().map(|e| e.compression).collect();
        let name = fixture.path.file_name().unwrap().to_string_lossy();
        let expect = |ok: bool, what: &str| {
            if !ok {
                Some(format!("{name}: {what}: {compressed:?}"))
            } else {
                None
            }
        };
        use cuda_sandbox_elfkit::fatbin::Compression as C;
        diffs.extend(match name.as_ref() {
            "compress-none.fatbin" => expect(compressed.iter().all(|c| *c == C::None), "none"),
            "compress-speed.fatbin" => expect(compressed.contains(&C::Lz4), "LZ4"),
            "compress-default.fatbin" | "compress-size.fatbin" => {
                expect(compressed.contains(&C::Zstd), "zstd")
            }
            "concat.fatbin" => expect(code.entries().all(|e| e.concatenated), "concatenated"),
            _ => None,
        });
    }
    assert!(files >= 10, "only {files} fat-binary fixtures");
    assert!(
        diffs.is_empty(),
        "{} difference(s):\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

#[test]
fn the_reader_lists_what_cuobjdump_lists_on_nvidias_own_libraries() {
    let Some(real) =
        RealNvidia::find("the_reader_lists_what_cuobjdump_lists_on_nvidias_own_libraries")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut diffs = Vec::new();
    let (curand, found) = compare(&real, &real.curand(), dir.path());
    diffs.extend(found);
    for cudart in [Cudart::V12_9, Cudart::V13_0] {
        diffs.extend(compare(&real, &real.cudadevrt(cudart), dir.path()).1);
    }
    assert!(
        diffs.is_empty(),
        "{} difference(s):\n{}",
        diffs.len(),
        diffs.join("\n")
    );
    // cuRAND 10.4 (CUDA 13.x): 13 modules in .nv_fatbin, 186 entries; the .data ones too.
    let listed: Vec<_> = curand.listed_by_cuobjdump().collect();
    assert_eq!(listed.len(), 13);
    assert_eq!(listed.iter().map(|c| c.entries.len()).sum::<usize>(), 186);
    let scanned = curand
        .containers
        .iter()
        .filter(|c| matches!(c.origin, Origin::Scan(_)))
        .count();
    assert!(
        scanned > 1000,
        "{scanned} containers found in cuRAND's data"
    );
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
    for c in code.listed_by_cuobjdump() {
        for e in &c.entries {
            let kind = match e.kind {
                EntryKind::Sass => "cubin",
                EntryKind::Ptx => "ptx",
                _ => continue,
            };
            match payload(&data, e) {
                Ok(bytes) => ours.push((kind.into(), trim(&bytes))),
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

/// The unpacker (LZ4 blocks, Zstandard frames, concatenated parts) against cuobjdump's
/// extraction, on fat binaries fatbinary 13.5 packs in every compression mode and on
/// NVIDIA's nvJPEG 12.4 (LZ4) and 13.2 (Zstandard).
#[test]
fn every_payload_unpacks_to_what_cuobjdump_extracts() {
    let test = "every_payload_unpacks_to_what_cuobjdump_extracts";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fixtures = fatbin_fixtures::build(&real, &dir.path().join("fixtures"));
    let mut paths: Vec<std::path::PathBuf> = fixtures
        .iter()
        .filter(|f| {
            let name = f.path.file_name().unwrap().to_string_lossy();
            name.starts_with("compress-") || name == "concat.fatbin" || name == "all.fatbin"
        })
        .map(|f| f.path.clone())
        .collect();
    assert!(paths.len() >= 7, "{paths:?}");
    for (wheel, file) in [
        ("nvjpeg-12.4.0", "libnvjpeg.so.12"),
        ("nvjpeg-13.2.3", "libnvjpeg.so.13"),
    ] {
        let path = real.corpus(wheel, file);
        if !real.has(test, &path) {
            return;
        }
        paths.push(path);
    }
    let diffs: Vec<String> = paths
        .iter()
        .flat_map(|p| payload_differences(&real, p, dir.path()))
        .collect();
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

/// `__nv_relfatbin` in a linked shared object is device-link input; every container of an
/// object or archive member is link input; the rest is loaded by the driver.
#[test]
fn link_input_is_told_apart_from_what_the_driver_loads() {
    use cuda_sandbox_elfkit::fatbin::Purpose;
    let Some(real) = RealNvidia::find("link_input_is_told_apart_from_what_the_driver_loads") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fixtures = fatbin_fixtures::build(&real, &dir.path().join("fixtures"));
    let by_name = |name: &str| {
        let f = fixtures
            .iter()
            .find(|f| f.path.file_name().unwrap() == name)
            .unwrap_or_else(|| panic!("no fixture {name}"));
        read_file(&f.path).unwrap()
    };
    let purposes = |code: &GpuCode| -> Vec<(String, Purpose)> {
        code.containers
            .iter()
            .map(|c| {
                let place = match &c.origin {
                    Origin::Section(s) | Origin::Wrapper(s) | Origin::Scan(s) => s.clone(),
                    Origin::File => "file".into(),
                };
                (place, c.purpose)
            })
            .collect()
    };
    let mixed = purposes(&by_name("exec-and-rel.so"));
    assert!(
        mixed.contains(&(".nv_fatbin".into(), Purpose::Loadable)),
        "{mixed:?}"
    );
    assert!(
        mixed.contains(&("__nv_relfatbin".into(), Purpose::DeviceLinkInput)),
        "{mixed:?}"
    );
    for name in ["rel1.o", "librel.a"] {
        let all = purposes(&by_name(name));
        assert!(
            !all.is_empty() && all.iter().all(|(_, p)| *p == Purpose::LinkInput),
            "{name}: {all:?}"
        );
    }
    let so = purposes(&by_name("embedded.so"));
    assert!(so.iter().all(|(_, p)| *p == Purpose::Loadable), "{so:?}");
}

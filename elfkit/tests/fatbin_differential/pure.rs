//! The pure tier of these tests (docs/testing.md).

use super::*;

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
            "concat.fatbin" => expect(
                code.entries().all(|e| e.stored.part.is_some()),
                "concatenated",
            ),
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
    let listed: Vec<_> = listed_by_cuobjdump(&curand).collect();
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

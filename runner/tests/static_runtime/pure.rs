//! The pure tier of these tests (docs/testing.md).

use super::*;

/// The one-pass search agrees with the two passes on NVIDIA's libraries: the corpus (cuRAND
/// with its 1,700 containers in `.data` and a static runtime, cuFFT's 280 MB `.ldata`,
/// nvJPEG), the shared runtimes and the drivers.
#[test]
fn the_one_pass_string_search_finds_what_two_passes_find_on_nvidias_libraries() {
    let test = "the_one_pass_string_search_finds_what_two_passes_find_on_nvidias_libraries";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    let mut files: Vec<PathBuf> = [
        ("curand-10.3.10", "libcurand.so.10"),
        ("curand-10.4.4", "libcurand.so.10"),
        ("cufft-11.4.1", "libcufft.so.11"),
        ("cufft-11.4.1", "libcufftw.so.11"),
        ("nvjpeg-12.4.0", "libnvjpeg.so.12"),
        ("nvjpeg-13.2.3", "libnvjpeg.so.13"),
    ]
    .iter()
    .map(|(wheel, file)| real.corpus(wheel, file))
    .collect();
    files.extend(Cudart::ALL.map(|c| real.cudart(c)));
    files.extend(Branch::ALL.map(|b| real.libcuda_file(b)));
    files.push(real.curand());
    for file in files {
        if !real.has(test, &file) {
            return;
        }
        let handle = std::fs::File::open(&file).unwrap();
        let map = Mapped::of(&handle).unwrap();
        assert_one_pass_agrees(&file, map.bytes());
    }
}

/// An empty section placed where `.rodata` starts (a section header a tool may leave) hides
/// nothing: nvJPEG 12.4's static runtime is still found, by the one pass as by the two. The
/// empty section used to take `.rodata`'s place in the search, and the runtime went unseen.
#[test]
fn an_empty_section_at_a_string_sections_offset_hides_no_runtime() {
    let test = "an_empty_section_at_a_string_sections_offset_hides_no_runtime";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    let file = real.corpus("nvjpeg-12.4.0", "libnvjpeg.so.12");
    if !real.has(test, &file) {
        return;
    }
    let mut data = std::fs::read(&file).unwrap();
    // ELF64 section headers: e_shoff at 0x28, 64 bytes each; sh_offset at +24, sh_size at +32.
    // Measured (readelf -S): [14] .rodata, then [16] .stapsdt.base (PROGBITS, alloc, 1 byte).
    let u64_at = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
    let headers = u64_at(0x28) as usize;
    let rodata = u64_at(headers + 14 * 64 + 24);
    let empty = headers + 16 * 64;
    data[empty + 24..empty + 32].copy_from_slice(&rodata.to_le_bytes());
    data[empty + 32..empty + 40].fill(0);
    let dir = tempfile::tempdir().unwrap();
    let patched = dir.path().join("libnvjpeg.so.12");
    std::fs::write(&patched, &data).unwrap();
    let found = classify(&patched).expect("the static runtime is found");
    assert_eq!(found.version.map(|v| v.to_string()), Some("12.9".into()));
}

#[test]
fn stripped_static_copies_are_found_with_their_version() {
    let Some(real) = RealNvidia::find("stripped_static_copies_are_found_with_their_version") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    for cudart in [Cudart::V12_9, Cudart::V13_0] {
        let version = version_of(cudart);
        let program = build_with(
            temp.path(),
            &real,
            Some(cudart),
            PROGRAM,
            &format!("app-{version}"),
            &[],
        );
        // The runtime runs and says its version: the copy is a working one.
        let out = Command::new(&program).output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("0 {}", cudart.cuda_version())
        );
        let library = build_with(
            temp.path(),
            &real,
            Some(cudart),
            LIBRARY,
            &format!("libapp-{version}.so"),
            &["-shared", "-fPIC"],
        );
        let collected = build_with(
            temp.path(),
            &real,
            Some(cudart),
            PROGRAM,
            &format!("app-gc-{version}"),
            &["-O2", "-ffunction-sections", "-Wl,--gc-sections"],
        );
        for file in [&program, &library, &collected] {
            for strip in Strip::ALL {
                let stripped = strip.copy(file);
                let found = classify(&stripped)
                    .unwrap_or_else(|| panic!("no runtime found in {}", stripped.display()));
                assert_eq!(found.form, RuntimeForm::StaticCopy, "{found:?}");
                assert_eq!(
                    found.version.map(|v| v.to_string()).as_deref(),
                    Some(&*version),
                    "{found:?}"
                );
                assert!(found.evidence.starts_with("strings: "), "{found:?}");
                let constant =
                    format!("cudaRuntimeGetVersion's constant {}", cudart.cuda_version());
                assert!(found.evidence.ends_with(&constant), "{found:?}");
                let data = std::fs::read(&stripped).unwrap();
                let evidence = static_runtime_in(&data).expect("the runtime's strings");
                assert_eq!(evidence.markers.len(), 4, "{evidence:?}");
            }
        }
    }
}

/// Issue 49: JAX's CUDA plugins define `cudaGetDriverEntryPoint` and the rest of the runtime's
/// API as XLA's `cudart_stub.cc` trampolines, with none of the runtime's own strings: not a
/// runtime (it was "a static-copy, 12.x" runtime, in the CUDA 13 plugin too).
#[test]
fn xla_cudart_stubs_in_jax_plugins_are_not_runtimes() {
    let test = "xla_cudart_stubs_in_jax_plugins_are_not_runtimes";
    let Some(real) = RealNvidia::find(test) else {
        return;
    };
    for major in [12, 13] {
        let wheel = real.jax_plugin_wheel(major);
        if !real.has(test, &wheel) {
            return;
        }
        let mut zip = zip::ZipArchive::new(std::fs::File::open(&wheel).unwrap()).unwrap();
        let mut stubs = 0;
        for i in 0..zip.len() {
            let mut member = zip.by_index(i).unwrap();
            if !member.name().ends_with(".so") {
                continue;
            }
            let name = PathBuf::from(member.name());
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut member, &mut data).unwrap();
            let elf = object::File::parse(&*data).unwrap();
            let defines = object::Object::symbols(&elf)
                .chain(object::Object::dynamic_symbols(&elf))
                .any(|s| {
                    object::ObjectSymbol::name(&s) == Ok("cudaGetDriverEntryPoint")
                        && object::ObjectSymbol::is_definition(&s)
                });
            stubs += usize::from(defines);
            assert_eq!(
                runtime_in(&name, Some(&data), &[]),
                None,
                "{name:?} in {wheel:?}"
            );
        }
        // The case is there: most of the plugin's libraries define the stub.
        assert!(stubs >= 8, "{stubs} stub(s) in {}", wheel.display());
    }
}

#[test]
fn drivers_and_other_libraries_are_not_runtimes() {
    let Some(real) = RealNvidia::find("drivers_and_other_libraries_are_not_runtimes") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let control = build(temp.path(), &real, CONTROL, "control", &[]);
    let mut files = vec![control.clone(), Strip::NixpkgsAll.copy(&control)];
    for branch in Branch::ALL {
        let dir = real.driver_dir(branch);
        files.push(real.libcuda_file(branch));
        files.push(std::fs::canonicalize(dir.join("libnvidia-ml.so.1")).unwrap());
        files.push(std::fs::canonicalize(dir.join("libnvidia-ptxjitcompiler.so.1")).unwrap());
    }
    files.push(real.curand());
    files.extend([real.cuobjdump(), real.fatbinary()]);
    for system in [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/bin/ls",
    ] {
        if Path::new(system).is_file() {
            files.push(std::fs::canonicalize(system).unwrap());
        }
    }
    files.push(PathBuf::from(RUNNER));
    for file in &files {
        let data = std::fs::read(file).unwrap();
        assert_eq!(
            static_runtime_in(&data),
            None,
            "{} holds no CUDA runtime",
            file.display()
        );
        assert_eq!(
            runtime_in(file, Some(&data), &[]),
            None,
            "{}",
            file.display()
        );
    }
}

#[test]
fn shared_runtimes_are_found_with_the_version_in_their_code() {
    let Some(real) = RealNvidia::find("shared_runtimes_are_found_with_the_version_in_their_code")
    else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    for cudart in Cudart::ALL {
        let version = version_of(cudart);
        // In the cache: the directory (`cudart-12.9`) names the version.
        let found = classify(&real.cudart(cudart)).expect("a runtime");
        assert_eq!(found.form, RuntimeForm::Shared);
        assert_eq!(
            found.version.map(|v| v.to_string()).as_deref(),
            Some(&*version),
            "{found:?}"
        );
        // Under its SONAME only (`libcudart.so.12`, or 11.8's `libcudart.so.11.0`), which names
        // the major at most: the code gives the rest.
        let dir = temp.path().join(format!("{cudart:?}"));
        std::fs::create_dir_all(&dir).unwrap();
        let bare = dir.join(cudart.file_name());
        std::fs::copy(real.cudart(cudart), &bare).unwrap();
        let found = classify(&bare).expect("a runtime");
        assert_eq!(found.form, RuntimeForm::Shared);
        assert_eq!(
            found.version.map(|v| v.to_string()).as_deref(),
            Some(&*version),
            "{found:?}"
        );
        assert!(
            found.evidence.contains("cudaRuntimeGetVersion's constant"),
            "{found:?}"
        );
        // Its strings are the runtime's, as in the static copies.
        let data = std::fs::read(&bare).unwrap();
        let evidence = static_runtime_in(&data).expect("the runtime's strings");
        assert_eq!(evidence.markers.len(), 4, "{evidence:?}");
        assert_eq!(
            evidence.version.map(|v| v.version.to_string()).as_deref(),
            Some(&*version)
        );
    }
}

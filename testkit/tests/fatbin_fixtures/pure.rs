//! The pure tier of these tests (docs/testing.md).

use super::*;

#[test]
fn fixtures_list_as_cuobjdump_should() {
    let Some(real) = RealNvidia::find("fixtures_list_as_cuobjdump_should") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temporary directory");
    let started = std::time::Instant::now();
    let fixtures = build(&real, dir.path());
    eprintln!(
        "built {} fixtures in {:?}",
        fixtures.len(),
        started.elapsed()
    );
    let names = gpu_names(&real);
    let sms = names.iter().filter(|n| n.starts_with("sm_")).count();
    let computes = names.iter().filter(|n| n.starts_with("compute_")).count();
    assert!(sms >= 26 && computes >= 26, "{names:?}");
    assert!(names.iter().any(|n| n == "sm_107f"), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "sm_101"),
        "sm_101 is gone in 13.x"
    );

    // Every image of every container lists, whatever the compression or concatenation.
    for name in [
        "all.fatbin",
        "compress-none.fatbin",
        "compress-default.fatbin",
        "compress-speed.fatbin",
        "compress-size.fatbin",
        "compress-balance.fatbin",
        "compress-all.fatbin",
        "concat.fatbin",
    ] {
        let f = fixture(&fixtures, name);
        let listed = cuobjdump_list(&real, &f.path);
        assert_eq!(count(&listed, ListedKind::Elf), sms, "{name}");
        assert_eq!(count(&listed, ListedKind::Ptx), computes, "{name}");
        assert_eq!(listed.len(), f.images, "{name}");
    }
    assert_eq!(
        first_entry_kind(&fixture(&fixtures, "concat.fatbin").path),
        0x100
    );
    assert_eq!(first_entry_kind(&fixture(&fixtures, "all.fatbin").path), 2);

    // 'f' cubins lose their suffix, 'a' cubins and all PTX keep theirs.
    let all = cuobjdump_list(&real, &fixture(&fixtures, "all.fatbin").path);
    let elf = archs(&all, ListedKind::Elf);
    let ptx = archs(&all, ListedKind::Ptx);
    assert!(
        elf.contains(&"sm_90a") && elf.contains(&"sm_100a"),
        "{elf:?}"
    );
    assert!(!elf.iter().any(|a| a.ends_with('f')), "{elf:?}");
    assert!(
        ptx.contains(&"sm_100f") && ptx.contains(&"sm_90a"),
        "{ptx:?}"
    );
    let numbers: Vec<usize> = all
        .iter()
        .filter(|l| l.kind == ListedKind::Elf)
        .map(|l| l.number)
        .collect();
    assert_eq!(numbers, (1..=sms).collect::<Vec<_>>());

    let af = fixture(&fixtures, "af-only.fatbin");
    assert_eq!(cuobjdump_list(&real, &af.path).len(), af.images);
    let two = fixture(&fixtures, "two-containers.fatbin");
    assert_eq!(cuobjdump_list(&real, &two.path).len(), two.images);

    let embedded = fixture(&fixtures, "embedded.so");
    assert_eq!(cuobjdump_list(&real, &embedded.path).len(), embedded.images);
    let both = fixture(&fixtures, "exec-and-rel.so");
    assert_eq!(cuobjdump_list(&real, &both.path).len(), both.images);

    // Archive members are named; the numbers carry on from member to member.
    let archive = fixture(&fixtures, "librel.a");
    assert_eq!(archive.kind, FixtureKind::Archive);
    let listed = cuobjdump_list(&real, &archive.path);
    assert_eq!(listed.len(), archive.images);
    let members: Vec<(&str, ListedKind, usize, &str)> = listed
        .iter()
        .map(|l| {
            (
                l.member.as_deref().unwrap_or(""),
                l.kind,
                l.number,
                l.arch.as_str(),
            )
        })
        .collect();
    assert_eq!(
        members,
        [
            ("rel1.o", ListedKind::Elf, 1, "sm_75"),
            ("rel1.o", ListedKind::Elf, 2, "sm_90a"),
            ("rel1.o", ListedKind::Ptx, 1, "sm_75"),
            ("rel2.o", ListedKind::Elf, 3, "sm_100"),
            ("rel2.o", ListedKind::Elf, 4, "sm_120"),
        ]
    );
    assert_eq!(listed[3].name, "librel.3.sm_100.cubin");

    // cuobjdump does not find a container held as a plain array in .rodata.
    assert!(cuobjdump_list(&real, &fixture(&fixtures, "rodata.so").path).is_empty());

    let size: u64 = fixtures
        .iter()
        .map(|f| std::fs::metadata(&f.path).expect("fixture").len())
        .sum();
    assert!(size < 4 << 20, "the fixtures take {size} bytes");
}

#[test]
fn real_libraries_list() {
    let Some(real) = RealNvidia::find("real_libraries_list") else {
        return;
    };
    let curand = cuobjdump_list(&real, &real.curand());
    assert_eq!(curand.len(), 186);
    assert_eq!(curand[0].name, "libcurand.so.1.sm_75.ptx");
    assert_eq!(curand.last().map(|l| l.number), Some(93));
    for cudart in [Cudart::V12_9, Cudart::V13_0] {
        let listed = cuobjdump_list(&real, &real.cudadevrt(cudart));
        assert!(!listed.is_empty(), "{cudart:?}");
        assert!(
            listed
                .iter()
                .all(|l| l.member.as_deref() == Some("cuda_device_runtime.o")),
            "{listed:?}"
        );
    }
}

//! The pure tier of these tests (docs/testing.md).

use super::*;

#[test]
fn each_architectures_first_release_is_the_first_ptxas_that_accepts_it() {
    let Some(real) =
        RealNvidia::find("each_architectures_first_release_is_the_first_ptxas_that_accepts_it")
    else {
        return;
    };
    let releases = real.ptxas_releases();
    if !["11.7", "11.8", "12.0", "12.6", "12.8", "13.3", "13.4"]
        .iter()
        .all(|r| {
            real.has(
                "the architecture table",
                &real.dir().join(format!("ptxas-{r}/ptxas")),
            )
        })
    {
        return;
    }
    let lists: Vec<(String, BTreeSet<String>)> = releases
        .iter()
        .map(|(r, p)| (r.clone(), accepted(p)))
        .collect();
    let oldest = key(&lists[0].0);
    let mut checked = 0;
    for row in architectures() {
        let sm = format!("sm_{}", row.capability.sm());
        // The first measured release that lists `name`, and whether an older measured one did.
        let first_listing = |name: &str| {
            lists
                .iter()
                .find(|(_, l)| l.contains(name))
                .map(|(r, _)| r.clone())
        };
        let wanted = |first: CudaVersion| {
            let r = first.to_string();
            // Rows older than the oldest measured ptxas: that ptxas lists it already.
            if key(&r) < oldest {
                lists[0].0.clone()
            } else {
                r
            }
        };
        if !lists.iter().any(|(_, l)| l.contains(&sm)) {
            // Dropped by every measured toolkit (Kepler, 3.2): nothing to hold.
            assert!(
                key(&row.first.to_string()) < oldest,
                "{sm}: no measured ptxas accepts it, yet the table says it is new in {}",
                row.first
            );
            continue;
        }
        let first = first_listing(&sm).unwrap();
        // A toolkit may drop an old architecture (13.0 drops sm_50..sm_72), so only rows first
        // seen by the measured range are held to a first listing; older ones must be listed by
        // the oldest ptxas measured.
        assert_eq!(first, wanted(row.first), "{sm}: first ptxas listing it");
        for (variant, since) in [("a", row.arch_specific), ("f", row.family)] {
            let name = format!("{sm}{variant}");
            match since {
                Some(r) => assert_eq!(
                    first_listing(&name),
                    Some(wanted(r)),
                    "{name}: first ptxas listing it"
                ),
                None => assert_eq!(
                    first_listing(&name),
                    None,
                    "{name}: listed, the table has no row"
                ),
            }
        }
        // Renamed: no ptxas after its last release lists it (Thor: sm_101 until 12.9).
        if let Some(until) = row.until {
            if let Retired::RenamedTo(to) = until.then {
                let after: Vec<&String> = lists
                    .iter()
                    .filter(|(r, l)| key(r) > key(&until.cuda.to_string()) && l.contains(&sm))
                    .map(|(r, _)| r)
                    .collect();
                assert!(
                    after.is_empty(),
                    "{sm} renamed {to} yet listed by {after:?}"
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 15, "{checked} rows held to ptxas");
    // The newest ptxas knows no architecture the table lacks.
    let (newest, list) = lists.last().unwrap();
    for name in list {
        let base = name.trim_end_matches(['a', 'f']);
        let number: u32 = base.trim_start_matches("sm_").parse().unwrap();
        let known = architectures().iter().any(|r| r.capability.sm() == number);
        assert!(
            known,
            "ptxas {newest} accepts {name}: add its row to gpus.txt"
        );
    }
}

#[test]
fn cubins_record_their_toolkit_kernels_and_managed_variables() {
    let Some(real) = RealNvidia::find("cubins_record_their_toolkit_kernels_and_managed_variables")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // (release, architecture, ISA, the ELF ABI it writes)
    let cases = [
        ("11.8", 75, "7.8", 7),
        ("12.0", 75, "8.0", 7),
        ("12.9", 52, "7.8", 7),
        ("12.8", 100, "8.7", 8),
        ("12.9", 100, "8.8", 8),
        ("13.0", 75, "9.0", 8),
        ("13.5", 90, "9.5", 8),
    ];
    for (release_name, sm, isa, abi) in cases {
        let Some(ptxas) = real.ptxas_release(release_name) else {
            let wanted = real.dir().join(format!("ptxas-{release_name}/ptxas"));
            assert!(!real.has(
                "cubins_record_their_toolkit_kernels_and_managed_variables",
                &wanted
            ));
            return;
        };
        let (major, minor) = key(release_name);
        let toolkit = CudaVersion((major * 1000 + minor * 10) as i32);
        let name = format!("{release_name}-{sm}");
        let k = cubin_facts(&assemble(
            &ptxas,
            &ptx(isa, sm, true, false),
            sm,
            dir.path(),
            &format!("{name}-k"),
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            (k.abi, k.toolkit, k.symbols.kernels, k.symbols.managed),
            (abi, Some(toolkit), vec!["k".to_owned()], vec![]),
            "{name} kernel"
        );
        let d = cubin_facts(&assemble(
            &ptxas,
            &ptx(isa, sm, false, true),
            sm,
            dir.path(),
            &format!("{name}-d"),
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            (d.symbols.kernels, d.symbols.managed),
            (vec![], vec!["counter".to_owned()]),
            "{name} managed (cuobjdump -elf: MANAGED)"
        );
        let none = cubin_facts(&assemble(
            &ptxas,
            &ptx(isa, sm, false, false),
            sm,
            dir.path(),
            &format!("{name}-n"),
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(none.symbols.inert(), "{name}: {none:?}");
        assert_eq!(none.toolkit, Some(toolkit), "{name}");
    }
}

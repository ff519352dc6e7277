//! The pure tier of these tests (docs/testing.md).

use super::*;

#[test]
fn the_hand_built_modules_are_what_cuobjdump_lists() {
    let Some(real) = RealNvidia::find("the_hand_built_modules_are_what_cuobjdump_lists") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kernelless = dir.path().join("kernelless.fatbin");
    std::fs::write(&kernelless, kernelless_sm52_fatbin()).unwrap();
    let listed = cuobjdump(&real, &["--list-elf"], &kernelless);
    assert!(listed.contains("sm_52"), "{listed}");
    let elf = cuobjdump(&real, &["-elf"], &kernelless);
    for needed in [
        "arch = sm_52",
        "abi=7",
        "sm=52",
        "toolkit=129",
        ".nv.callgraph",
    ] {
        assert!(elf.contains(needed), "{needed:?} not in:\n{elf}");
    }
    // Nothing to launch: no symbol marked ENTRY, no function section.
    assert!(!elf.contains("ENTRY") && !elf.contains(".text."), "{elf}");
    let saxpy = dir.path().join("saxpy.fatbin");
    std::fs::write(&saxpy, saxpy_fatbin()).unwrap();
    let ptx = cuobjdump(&real, &["-ptx"], &saxpy);
    assert!(
        ptx.contains("arch = sm_50") && ptx.contains(".entry saxpy"),
        "{ptx}"
    );
}

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
    // One kernel in sm_80 SASS alone, and one managed variable in sm_52 SASS alone: cuobjdump
    // names them ENTRY and MANAGED as it does ptxas' own.
    let sm80 = dir.path().join("sm80.fatbin");
    std::fs::write(&sm80, sm80_only_fatbin()).unwrap();
    let elf = cuobjdump(&real, &["-elf"], &sm80);
    for needed in [
        "arch = sm_80",
        "sm=80",
        "ENTRY",
        SM80_KERNEL,
        ".text.cuda_sandbox",
    ] {
        assert!(elf.contains(needed), "{needed:?} not in:\n{elf}");
    }
    let managed = dir.path().join("managed.fatbin");
    std::fs::write(&managed, managed_sm52_fatbin()).unwrap();
    let elf = cuobjdump(&real, &["-elf"], &managed);
    for needed in ["arch = sm_52", "MANAGED", MANAGED_VARIABLE, ".nv.global"] {
        assert!(elf.contains(needed), "{needed:?} not in:\n{elf}");
    }
    assert!(!elf.contains("ENTRY"), "{elf}");
    let saxpy = dir.path().join("saxpy.fatbin");
    std::fs::write(&saxpy, saxpy_fatbin()).unwrap();
    let ptx = cuobjdump(&real, &["-ptx"], &saxpy);
    assert!(
        ptx.contains("arch = sm_50") && ptx.contains(".entry saxpy"),
        "{ptx}"
    );
}

//! The pure tier of these tests (docs/testing.md).

use super::*;

#[test]
fn saxpy_ptx_assembles_for_every_architecture_from_volta_that_ptxas_knows() {
    let Some(real) = RealNvidia::find("saxpy_ptx_assembles_for_every_architecture_from_volta")
    else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let ptx = temp.path().join("saxpy.ptx");
    std::fs::write(&ptx, SAXPY_PTX).unwrap();
    let out = temp.path().join("saxpy.cubin");
    let mut failures = Vec::new();
    for (major, must_have) in [
        (12, &["sm_70", "sm_80", "sm_90", "sm_100", "sm_120"][..]),
        (13, &["sm_75", "sm_80", "sm_90", "sm_100", "sm_120"][..]),
    ] {
        let ptxas = real.ptxas(major);
        let mut names: Vec<String> = gpu_names(&ptxas)
            .into_iter()
            .filter(|name| arch_number(name) >= OLDEST)
            .collect();
        names.sort_by_key(|name| (arch_number(name), name.clone()));
        for name in must_have {
            assert!(
                names.iter().any(|n| n == name),
                "ptxas {major} lists no {name} in --help: {names:?}"
            );
        }
        let mut assembled = Vec::new();
        for name in &names {
            match assemble(&ptxas, name, &ptx, &out) {
                Ok(()) => assembled.push(name.as_str()),
                Err(why) => failures.push(format!("ptxas {major} -arch={name}: {why}")),
            }
        }
        println!(
            "ptxas {major}: saxpy.ptx assembles for {} ({} architectures)",
            assembled.join(" "),
            assembled.len()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The test above can fail: ptxas refuses a broken copy of the same PTX.
#[test]
fn ptxas_refuses_a_broken_saxpy() {
    let Some(real) = RealNvidia::find("ptxas_refuses_a_broken_saxpy") else {
        return;
    };
    let temp = tempfile::tempdir().unwrap();
    let ptx = temp.path().join("broken.ptx");
    let broken = SAXPY_PTX.replacen("ret;", "ret.bogus;", 1);
    assert_ne!(broken, SAXPY_PTX, "the PTX has a ret; to break");
    std::fs::write(&ptx, broken).unwrap();
    for major in [12, 13] {
        let refused = assemble(&real.ptxas(major), "sm_90", &ptx, &temp.path().join("x"));
        assert!(refused.is_err(), "ptxas {major} accepted broken PTX");
    }
}

//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn the_leased_instance_passes_and_says_what_it_verified_without_a_uuid() {
    let d = driver(
        vec![gpu(0)],
        vec![instance(0, 1, 0), instance(0, 2, 0)],
        true,
    );
    let run = run_leased(&d, lease(0, 1, 0, None));
    run.assert_check(
        "mig::instance",
        "pass",
        &[
            "MIG instance gpu0/gi1/ci0",
            SLICE,
            "MIG-fa4e0000-0000-4000-8000-000000010000",
            "CUDA sees exactly one device",
            "NVML lists it as MIG device",
            "parent /dev/nvidiaN minor 0",
            "GPU instance 1",
            "compute instance 0",
        ],
    );
    let facts: MigFacts = run.facts("mig::instance");
    assert!(facts.not_verified.is_empty(), "{facts:?}");
    assert_eq!(facts.cuda_has_uuid_v2, Some(true));
    // NVML sees the parent GPU, CUDA the instance: they agree through the MIG handle.
    run.assert_check("nvml::consistency", "pass", &["agree on 1 GPU(s)"]);
    let nvml: ConsistencyFacts = run.facts("nvml::consistency");
    let gpus = nvml.gpus.unwrap();
    assert_eq!(gpus.len(), 1);
    assert!(
        gpus[0].contains("MIG device of NVIDIA H200 GPU-fa4e0000"),
        "{gpus:?}"
    );
    assert_eq!(run.code, 0, "{run}");
}

#[test]
fn a_manifest_uuid_is_compared() {
    let d = driver(vec![gpu(0)], vec![instance(0, 1, 0)], true);
    let uuid = "MIG-fa4e0000-0000-4000-8000-000000010000";
    let run = run_leased(&d, lease(0, 1, 0, Some(uuid)));
    run.assert_check("mig::instance", "pass", &["its UUID is the manifest's"]);
    let other = "MIG-fa4e0000-0000-4000-8000-000000020000";
    let run = run_leased(&d, lease(0, 2, 0, Some(other)));
    run.assert_check(
        "mig::instance",
        "fail",
        &[uuid, other, "another instance than its lease"],
    );
}

#[test]
fn another_gpu_instance_than_the_lease_fails_naming_both() {
    let d = driver(vec![gpu(0)], vec![instance(0, 1, 0)], true);
    let run = run_leased(&d, lease(0, 2, 0, None));
    run.assert_check(
        "mig::instance",
        "fail",
        &["leased MIG instance gpu0/gi2/ci0", "GPU instance 1, not 2"],
    );
    let run = run_leased(&d, lease(3, 1, 0, None));
    run.assert_check(
        "mig::instance",
        "fail",
        &["parent /dev/nvidiaN minor 0, not 3"],
    );
}

#[test]
fn two_cuda_devices_fail_naming_them() {
    // GPU 0 whole, GPU 1 in MIG mode: CUDA sees GPU 0 and one instance of GPU 1.
    let d = driver(vec![gpu(0), gpu(1)], vec![instance(1, 1, 0)], true);
    let run = run_leased(&d, lease(1, 1, 0, None));
    run.assert_check(
        "mig::instance",
        "fail",
        &[
            "leased MIG instance gpu1/gi1/ci0 but CUDA sees 2 device(s)",
            "NVIDIA H200 GPU-fa4e0000-0000-4000-8000-000000000000",
            SLICE,
            "one MIG instance",
            "/dev/nvidia1",
        ],
    );
    // NVML and CUDA still agree: one whole GPU and one MIG instance.
    run.assert_check("nvml::consistency", "pass", &["agree on 2 GPU(s)"]);
    assert_eq!(run.code, 101, "{run}");
}

#[test]
fn a_whole_gpu_fails_as_not_a_mig_instance() {
    let d = driver(vec![gpu(0)], Vec::new(), true);
    let run = run_leased(&d, lease(0, 1, 0, None));
    run.assert_check(
        "mig::instance",
        "fail",
        &[
            "CUDA's only device is the whole GPU NVIDIA H200 GPU-fa4e0000",
            "MIG mode disabled",
            "not a MIG instance",
        ],
    );
}

#[test]
fn without_nvml_it_says_what_it_could_not_verify() {
    let d = driver(vec![gpu(0)], vec![instance(0, 1, 0)], false);
    let run = run_leased(&d, lease(0, 1, 0, None));
    run.assert_check(
        "mig::instance",
        "pass",
        &[
            "CUDA sees exactly one device",
            "not verified: that it is a MIG device, and its GPU, GPU instance and compute instance",
        ],
    );
}

#[test]
fn without_a_leased_instance_it_is_skipped() {
    let d = driver(vec![gpu(0)], vec![instance(0, 1, 0)], true);
    let run = run_leased(&d, None);
    run.assert_check("mig::instance", "skipped", &["names no MIG instance"]);
    let run = run_without_devices(&d.dir, &["--no-manifest"]);
    run.assert_check("mig::instance", "skipped", &["no MIG instance to check"]);
}

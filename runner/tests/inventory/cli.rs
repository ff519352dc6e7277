//! The cli tier of these tests (docs/testing.md).

use super::*;

/// Two GPUs of two capabilities, the second in MIG mode (CUDA would enumerate one MIG
/// instance in its place; NVML still lists it, with its capability and minor).
#[test]
fn each_gpu_is_written_with_its_capability_bus_address_and_minor() {
    let mut sidecar = gpus(&[(8, 9), (9, 0)]);
    sidecar.mig = vec![FakeMig {
        parent: 1,
        gi: 1,
        ci: 0,
        uuid: "MIG-fa4e0000-0000-4000-8000-000100010000".into(),
        name: "FAKE NVIDIA GPU 1 MIG 1g.10gb".into(),
    }];
    let driver = FakeDriver::driver(&sidecar);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    FakePci::create(&root, 2).unwrap();
    let output = dir.path().join("run/cuda-sandbox/inventory.json");
    let (code, stdout, stderr) = inventory(&driver, &root, &output);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout,
        format!(
            "nvidia0 0000:01:00.0 (0x2330): 8.9\nnvidia1 0000:02:00.0 (0x2330): 9.0\nwrote {}\n",
            output.display()
        )
    );
    let text = std::fs::read_to_string(&output).unwrap();
    assert_eq!(
        text,
        "{\"version\":1,\"gpus\":[{\"bdf\":\"0000:01:00.0\",\"pci_device\":\"0x2330\",\
         \"minor\":0,\"capability\":\"8.9\"},{\"bdf\":\"0000:02:00.0\",\"pci_device\":\
         \"0x2330\",\"minor\":1,\"capability\":\"9.0\"}]}\n"
    );
    let read = Inventory::parse(text.as_bytes()).unwrap();
    assert_eq!(read.gpus.len(), 2);
    let mode = std::fs::metadata(&output).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644);
    let leftovers: Vec<_> = std::fs::read_dir(output.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["inventory.json"], "no temporary file is left");
}

/// A GPU NVML lists that `/proc/driver/nvidia/gpus` does not name (a driver half up) writes
/// nothing and says which; a file already there is left as it was.
#[test]
fn a_gpu_the_proc_tree_lacks_writes_nothing() {
    let driver = FakeDriver::driver(&gpus(&[(8, 9), (9, 0)]));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    FakePci::create(&root, 1).unwrap();
    let output = dir.path().join("inventory.json");
    std::fs::write(&output, "old\n").unwrap();
    let (code, stdout, stderr) = inventory(&driver, &root, &output);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_eq!(
        stderr,
        "cuda-sandbox-check inventory: GPU 1 (FAKE NVIDIA GPU 1): no \
         /proc/driver/nvidia/gpus/*/information names Device Minor 1\n"
    );
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "old\n");
    let (code, _, stderr) = inventory(&driver, &dir.path().join("nothing"), &output);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot list"), "{stderr}");
}

//! The sandbox tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_cuda_build_on_an_amd_host_sees_exactly_the_amd_gpus_and_an_untagged_one_nothing() {
    let test = "a_cuda_build_on_an_amd_host_sees_exactly_the_amd_gpus_and_an_untagged_one_nothing";
    if !nix_available(test) {
        return;
    }
    let host = Host::new("");
    let (ok, untagged) = host.build("untagged");
    assert!(ok, "{untagged}");
    let (ok, tagged) = host.build("tagged");
    assert!(ok, "{tagged}");

    // Devices: the untagged build's /dev, plus /dev/kfd and /dev/dri with the four nodes.
    let names = |r: &str, key: &str| -> Vec<String> {
        let mut v: Vec<String> = line(r, key).split_whitespace().map(String::from).collect();
        v.sort();
        v
    };
    let mut expected = names(&untagged, "dev: ");
    expected.extend(["dri".to_string(), "kfd".to_string()]);
    expected.sort();
    assert_eq!(names(&tagged, "dev: "), expected, "{tagged}");
    assert_eq!(
        names(&tagged, "dri: "),
        ["card0", "card1", "renderD128", "renderD129"],
        "{tagged}"
    );
    for (node, numbers) in [
        ("/dev/kfd", "ed:0"),
        ("/dev/dri/card0", "e2:0"),
        ("/dev/dri/renderD129", "e2:81"),
    ] {
        assert_eq!(
            line(&tagged, &format!("node {node} ")),
            format!("character special file {numbers}"),
            "{tagged}"
        );
    }

    // /sys: the KFD topology and the GPUs' PCI devices, nothing else, read-only.
    assert_eq!(line(&tagged, "sys: "), "bus class dev devices ", "{tagged}");
    assert_eq!(
        line(&tagged, "sys devices: "),
        "pci0000:00 virtual ",
        "{tagged}"
    );
    assert_eq!(line(&tagged, "sys virtual: "), "kfd ", "{tagged}");
    assert_eq!(
        line(&tagged, "pci root: "),
        format!("{} {} pci_bus ", bridge_bdf(0), bridge_bdf(1)),
        "{tagged}"
    );
    assert_eq!(
        line(&tagged, "sys dev char: "),
        "226:0 226:1 226:128 226:129 ",
        "{tagged}"
    );
    assert_eq!(
        line(&tagged, "pci devices: "),
        format!("{} {} ", gpu_bdf(0), gpu_bdf(1)),
        "{tagged}"
    );
    assert_eq!(
        line(&tagged, "char 226:129 "),
        format!(
            "/sys/devices/pci0000:00/{}/{}/drm/renderD129 vendor {AMD_VENDOR}",
            bridge_bdf(1),
            gpu_bdf(1)
        ),
        "{tagged}"
    );
    assert_eq!(line(&tagged, "kfd nodes: "), "0 1 2 ", "{tagged}");
    assert_eq!(
        line(&tagged, "kfd node 2 "),
        "drm_render_minor 129",
        "{tagged}"
    );
    let mounts: Vec<&str> = tagged.lines().filter(|l| l.starts_with("mount ")).collect();
    assert!(!mounts.is_empty(), "{tagged}");
    for m in &mounts {
        let options = m.rsplit(' ').next().unwrap();
        assert!(
            options.split(',').any(|o| o == "ro"),
            "{m} is writable:\n{tagged}"
        );
    }
    assert!(tagged.contains("kfd write failed"), "{tagged}");
    assert!(tagged.contains("char create failed"), "{tagged}");

    // The driver link, through its store path.
    assert_eq!(line(&tagged, "driver: "), DRIVER_TEXT, "{tagged}");

    // The untagged build: none of it.
    assert_eq!(line(&untagged, "dri: "), "", "{untagged}");
    assert!(!untagged.contains("node /dev/kfd"), "{untagged}");
    assert!(untagged.contains("sys absent"), "{untagged}");
    assert_eq!(line(&untagged, "driver: "), "absent", "{untagged}");
    assert!(host.root.join("dev/kfd").exists());
}

#[test]
fn under_gpu_leases_an_amd_build_fails_saying_why_and_an_untagged_one_builds() {
    let test = "under_gpu_leases_an_amd_build_fails_saying_why_and_an_untagged_one_builds";
    if !nix_available(test) {
        return;
    }
    let host = Host::new("gpus_per_build = 1\n");
    let (ok, log) = host.build("tagged");
    assert!(!ok, "a leased AMD build started:\n{log}");
    assert!(
        log.contains("rule 'amd' exposes AMD GPUs (/dev/kfd), which GPU leases"),
        "{log}"
    );
    let (ok, untagged) = host.build("untagged");
    assert!(ok, "{untagged}");
    assert!(untagged.contains("sys absent"), "{untagged}");
}

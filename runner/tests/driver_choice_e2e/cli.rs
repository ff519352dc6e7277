//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn compat_not_listing_kernel_driver_is_rejected_with_reason() {
    // explain only: a plain (non-store) driver link and compat directory, so no Nix and no
    // device nodes are needed.
    let host = Host::new("470.82.01", false);
    let link = host.root.join("run/opengl-driver/lib");
    let on_470 = Sidecar {
        cuda_version: 11040,
        kernel_driver: "470.82.01".into(),
        ..Sidecar::default()
    };
    fake_driver_dir(&link, &on_470, &DRIVER_LIBRARIES, "470.82.01", None);
    // Found by the default compat glob /usr/local/cuda*/compat, under the host root.
    let compat = host.root.join("usr/local/cuda-12.2/compat");
    let compat_12_2 = Sidecar {
        cuda_version: 12020,
        ..on_470
    };
    fake_driver_dir(
        &compat,
        &compat_12_2,
        &[LIBCUDA],
        "535.104.05",
        Some(&[525, 535]),
    );
    host.configure("[rule.driver]\n");

    let (text, json) = host.explain();
    let why = "does not list the host's kernel driver branch 470";
    assert!(text.contains("driver:      host (CUDA 11.4)"), "{text}");
    assert!(text.contains(why), "{text}");
    let driver = &json["plan"]["driver"];
    assert_eq!(driver["kind"], "host", "{json:#}");
    assert!(driver["reason"].as_str().unwrap().contains(why), "{json:#}");
    let rejected = &json["plan"]["driver_choice"]["rejected"][0];
    assert_eq!(rejected["dir"], "/usr/local/cuda-12.2/compat", "{json:#}");
    assert!(rejected["why"].as_str().unwrap().contains(why), "{json:#}");
    assert!(rejected["why"].as_str().unwrap().contains("[525, 535]"));
    assert!(
        !exposed_inside(&json).iter().any(|p| p.contains("/compat")),
        "a rejected compat driver is exposed: {json:#}"
    );
}

//! The root tier of these tests (docs/testing.md).

use super::*;

#[test]
fn device_check_passes_on_the_fake_driver_and_writes_a_summary() {
    if !root_available("device_check_passes_on_the_fake_driver_and_writes_a_summary") {
        return;
    }
    workspace_binary("cuda-sandbox-check");
    workspace_binary("make-fake-driver");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests-gpu/device-check");
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(&script)
        .arg("--fake")
        .arg("--bin")
        .arg(target_profile_dir())
        .arg("--out")
        .arg(out.path())
        .arg("--elements")
        .arg("65536")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "device-check failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("== cuda-sandbox device-check: FAKE driver"),
        "{stdout}"
    );
    let summary = std::fs::read_to_string(out.path().join("summary.json")).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&summary).unwrap_or_else(|e| panic!("{e}: {summary}"));
    for step in ["direct", "explain", "exec"] {
        assert_eq!(v[step]["exit"], 0, "{step}: {summary}");
    }
    for step in ["direct", "exec"] {
        let r = &v[step]["report"];
        assert_eq!(r["failed_checks"], "0", "{summary}");
        assert_eq!(r["saxpy_elements"], "65536", "{summary}");
        assert!(
            r["bandwidth_gb_per_s"]
                .as_str()
                .unwrap()
                .parse::<f64>()
                .unwrap()
                > 0.0
        );
        assert_eq!(r["cuda_version"], "13.0");
    }
    assert_eq!(
        v["exec"]["report"]["libcuda"],
        "/run/opengl-driver/lib/libcuda.so.1"
    );
    // Step 4 needs a GPU: on the fake driver it is skipped, and says so.
    assert_eq!(v["gpu_confirm"]["eager"], "skipped", "{summary}");
    assert_eq!(v["gpu_confirm"]["lazy"], "skipped", "{summary}");
    assert!(v["explain"]["verdict"]
        .as_str()
        .unwrap()
        .starts_with("tagged"));
}

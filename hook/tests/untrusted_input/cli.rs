//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn the_hook_reads_a_big_untagged_structured_drv_in_linear_time() {
    // What nix-build met on f51a825: 50 s of hook for a 2 MB derivation.
    let dir = tempfile::tempdir().unwrap();
    let drv = dir.path().join("big.drv");
    std::fs::write(&drv, structured_drv("[", "0,", "0]", "big-parallel")).unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[[rule]]\nname = \"n\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia0\"\n",
    )
    .unwrap();
    let out = timed("the hook", || {
        Command::new(HOOK)
            .arg(&drv)
            .arg(dir.path().join("chroot"))
            .env("CUDA_SANDBOX_CONFIG", &config)
            .output()
            .unwrap()
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_big_structured_drv_costs_memory_near_its_size() {
    // f51a825 built a full serde_json::Value twice: 720 MB of RSS for a 60 MB derivation. The
    // `__json` of a `.drv` is read by the same typed visitors as a derivation given as JSON.
    let dir = tempfile::tempdir().unwrap();
    let drv = dir.path().join("big.drv");
    let text = big_of(
        48 << 20,
        r#"Derive([("out","/nix/store/x-big","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"requiredSystemFeatures\":[\"kvm\"],\"args\":["#,
        r#"[1,2,{\"a\":\"b\"}],"#,
        r#"[]]}"),("out","/nix/store/x-big")])"#,
    );
    std::fs::write(&drv, &text).unwrap();
    let mib = text.len() as f64 / (1 << 20) as f64;
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[[rule]]\nname = \"n\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia0\"\n",
    )
    .unwrap();
    drop(text);
    let out = Command::new(HOOK)
        .arg(&drv)
        .arg(dir.path().join("chroot"))
        .env("CUDA_SANDBOX_CONFIG", &config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peak = children_peak_mib();
    assert!(
        peak < 3.0 * mib,
        "peak RSS {peak:.0} MiB for a {mib:.0} MiB structured derivation"
    );
}

#[test]
fn a_yaml_spec_of_one_anchor_aliased_many_times_is_refused_at_once() {
    // serde_norway's alias limit counts jumps, not the events they replay: this 200 KB spec
    // (a 100 KB list anchored once, then aliased as the arguments of 2,500 hooks) made the
    // hook replay about 60 million strings; a root `explain` ran past 100 s at 12.8 GiB.
    let dir = tempfile::tempdir().unwrap();
    let mut text =
        String::from("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  env: &a [");
    while text.len() < 100 << 10 {
        text.push_str("\"x\", ");
    }
    text.push_str("\"x\"]\ndevices:\n- name: all\n  containerEdits:\n    hooks:\n");
    while text.len() < 200 << 10 {
        text.push_str("    - {hookName: createContainer, path: /bin/true, args: *a}\n");
    }
    let (config, spec) = yaml_spec_host(dir.path(), &text);
    let run = explain_capped(
        &config,
        &dir.path().join("out.json"),
        Duration::from_secs(20),
    );
    eprintln!(
        "{} KiB spec: explain took {:?}, peak RSS {:.1} MiB",
        text.len() >> 10,
        run.took,
        run.peak_mib
    );
    assert_eq!(run.code, Some(0), "explain did not finish: {}", run.stdout);
    let e: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let skipped = e["plan"]["skipped"].to_string();
    assert!(
        skipped.contains(&spec.display().to_string()) && skipped.contains("anchor"),
        "the spec was not refused for its anchor: {e:#}"
    );
    assert!(run.took < Duration::from_secs(1), "{:?}", run.took);
    assert!(run.peak_mib < 64.0, "peak RSS {:.1} MiB", run.peak_mib);
}

#[test]
fn a_yaml_spec_of_more_events_than_any_spec_has_is_refused_in_bounded_memory() {
    // No anchor, but 1.5 million events (3 MiB of one-letter list items): refused at the cap,
    // before a deserialiser holds them all.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from(
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\ncontainerEdits:\n  env: [",
    );
    while text.len() < 3 << 20 {
        text.push_str("x,");
    }
    text.push_str("x]\n");
    let (config, spec) = yaml_spec_host(dir.path(), &text);
    let run = explain_capped(
        &config,
        &dir.path().join("out.json"),
        Duration::from_secs(20),
    );
    eprintln!(
        "{} KiB spec: explain took {:?}, peak RSS {:.1} MiB",
        text.len() >> 10,
        run.took,
        run.peak_mib
    );
    assert_eq!(run.code, Some(0), "explain did not finish: {}", run.stdout);
    let skipped = run.stdout.clone();
    assert!(
        skipped.contains(&spec.display().to_string()) && skipped.contains("events"),
        "the spec was not refused at the event cap: {skipped}"
    );
    assert!(run.took < BOUND, "{:?}", run.took);
    // The text itself (read whole, 3 MiB) and the hook: the events are never all held.
    assert!(run.peak_mib < 64.0, "peak RSS {:.1} MiB", run.peak_mib);
}

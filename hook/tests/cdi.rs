//! CDI specs as a source, on fake host roots: the CDI project's own test specs (installed from
//! Debian by `scripts/setup`, never committed), and specs shaped like `nvidia-ctk cdi
//! generate`'s output (`tests/cdi/`: a GPU host in JSON and YAML, a MIG device, a NixOS host).
//! Checked through `explain --json` and the hook's real answer and manifest.

use cuda_sandbox_manifest::{DriverKind, Manifest};
use cuda_sandbox_testkit::{
    mknod_char, nix_available, nonce, root_available, shared_library, write_script, NixSandbox,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::HOOK;

/// Where Debian's `golang-github-container-orchestrated-devices-container-device-interface-dev`
/// puts the CDI project's schema test specs.
const CDI_TESTDATA: &str = "/usr/share/gocode/src/github.com/container-orchestrated-devices/container-device-interface/schema/testdata";
const LIBDIR: &str = "usr/lib/x86_64-linux-gnu";

/// Whether the CDI project's test specs are installed; under `CI=true` their absence fails.
fn testdata_available(test: &str) -> bool {
    if Path::new(CDI_TESTDATA).join("good").is_dir() {
        return true;
    }
    let why = "the CDI test specs are missing: run scripts/setup";
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        let h = Host {
            dir: tempfile::tempdir().unwrap(),
        };
        for d in ["root/dev", "specs/low", "specs/high", "store"] {
            std::fs::create_dir_all(h.path(d)).unwrap();
        }
        h
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn root(&self) -> PathBuf {
        self.path("root")
    }

    /// A character device at `rel` under the root.
    fn node(&self, rel: &str, major: u64, minor: u64) {
        let p = self.root().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        mknod_char(&p, major, minor).unwrap();
    }

    /// A file (a real shared library when `soname` is given) at `rel` under the root, or at
    /// an absolute path.
    fn file(&self, rel: &str, soname: Option<&str>) -> PathBuf {
        let p = if rel.starts_with('/') {
            PathBuf::from(rel)
        } else {
            self.root().join(rel)
        };
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        match soname {
            Some(s) => shared_library(&p, Some(s)).unwrap(),
            None => std::fs::write(&p, "fake\n").unwrap(),
        }
        p
    }

    /// Puts `text` as spec `name` into the spec directory `dir` (`low` or `high`).
    fn spec(&self, dir: &str, name: &str, text: &str) {
        let text = text.replace("@STORE@", &self.path("store").display().to_string());
        std::fs::write(self.path(&format!("specs/{dir}/{name}")), text).unwrap();
    }

    /// The NVIDIA nodes of `tests/cdi/gpu-host.yaml`.
    fn nvidia_nodes(&self) {
        self.node("dev/nvidia0", 195, 0);
        self.node("dev/nvidiactl", 195, 255);
        self.node("dev/nvidia-uvm", 235, 0);
        self.node("dev/nvidia-uvm-tools", 235, 1);
    }

    /// A config with one rule `r` answering `cuda` that names `cdi`; `rule` adds to it.
    fn config(&self, cdi: &[&str], rule: &str) -> PathBuf {
        let names: Vec<String> = cdi.iter().map(|c| format!("{c:?}")).collect();
        let p = self.path("config.toml");
        std::fs::write(
            &p,
            format!(
                "host_root = \"{root}\"\nstore_dir = \"{store}\"\nnix_store = \"{nix_store}\"\n\
                 runtime_dir = \"{run}\"\nclosure_cache = \"{cache}\"\n\
                 cdi_spec_dirs = [\"{low}\", \"{high}\"]\n\
                 [[rule]]\nname = \"r\"\nfeatures = [\"cuda\"]\ncdi = [{names}]\n{rule}",
                root = self.root().display(),
                store = self.path("store").display(),
                nix_store = self.path("nix-store").display(),
                run = self.path("run").display(),
                cache = self.path("cache").display(),
                low = self.path("specs/low").display(),
                high = self.path("specs/high").display(),
                names = names.join(", "),
            ),
        )
        .unwrap();
        // A closure is the store path itself: the fake store is no Nix store.
        write_script(
            &self.path("nix-store"),
            "#!/bin/sh\nshift 2\nfor p in \"$@\"; do echo \"$p\"; done\n",
        )
        .unwrap();
        p
    }

    /// Runs the hook as Nix would for a tagged .drv; returns its answer and the manifest.
    fn hook(&self, config: &Path) -> (String, Manifest) {
        self.hook_through(Path::new(HOOK), config, "t")
    }

    /// Runs `program` (the hook, or a wrapper of it) as Nix would for the tagged .drv `name`,
    /// with its own chroot; returns its answer and the manifest. A GPU it leases stays leased
    /// while this test runs (the lease's holder is the hook's parent: this process).
    fn hook_through(&self, program: &Path, config: &Path, name: &str) -> (String, Manifest) {
        let drv = self.path(&format!("{name}.drv"));
        std::fs::write(
            &drv,
            r#"Derive([("out","/nix/store/x-t","","")],[],[],"x86_64-linux","/bin/sh",[],[("requiredSystemFeatures","cuda")])"#,
        )
        .unwrap();
        let chroot = self.path(&format!("{name}.drv.chroot"));
        std::fs::create_dir_all(&chroot).unwrap();
        let out = Command::new(program)
            .arg(&drv)
            .arg(&chroot)
            .env("CUDA_SANDBOX_CONFIG", config)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let name = cuda_sandbox_hook::manifest_file::name_for(Some(&chroot));
        let manifest = Manifest::read(&self.path("run/manifests").join(name)).unwrap();
        (String::from_utf8(out.stdout).unwrap(), manifest)
    }
}

/// A spec of `tests/cdi/`.
fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/cdi")
            .join(name),
    )
    .unwrap()
}

/// (inside, outside, reason kind, CDI item or driver source) of every exposure.
fn exposures(e: &Value) -> Vec<(String, String, String, String)> {
    e["plan"]["exposures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let r = &x["reason"];
            let detail = r["item"].as_str().or(r["source"].as_str()).unwrap_or("");
            (
                x["inside"].as_str().unwrap().to_string(),
                x["outside"].as_str().unwrap().to_string(),
                r["kind"].as_str().unwrap().to_string(),
                detail.to_string(),
            )
        })
        .collect()
}

fn exposed(e: &Value, inside: &str, outside: &Path) -> Option<(String, String)> {
    exposures(e)
        .into_iter()
        .find(|(i, o, _, _)| i == inside && Path::new(o) == outside)
        .map(|(_, _, k, d)| (k, d))
}

fn skipped_why(e: &Value, path: &str) -> String {
    e["plan"]["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"] == path)
        .map_or_else(String::new, |s| s["why"].as_str().unwrap().to_string())
}

fn not_carried_out(e: &Value) -> Vec<String> {
    e["plan"]["not_carried_out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["edit"].to_string())
        .collect()
}

#[test]
fn the_cdi_projects_test_specs_expose_what_they_list() {
    if !root_available("the_cdi_projects_test_specs_expose_what_they_list")
        || !testdata_available("the_cdi_projects_test_specs_expose_what_they_list")
    {
        return;
    }
    let h = Host::new();
    let read = |f: &str| std::fs::read_to_string(Path::new(CDI_TESTDATA).join(f)).unwrap();
    // Both good specs define vendor.com/device=myDevice: the higher directory's wins. The bad
    // ones are reported and change nothing.
    h.spec("low", "minimal.json", &read("good/minimal.json"));
    h.spec("high", "spec-example.json", &read("good/spec-example.json"));
    h.spec("high", "empty.json", &read("bad/empty.json"));
    h.spec(
        "high",
        "explicit-empty.json",
        &read("bad/explicit-empty.json"),
    );
    h.node("vendorroot/dev/card1", 226, 1);
    h.node("dev/card2", 226, 2);
    h.node("dev/vendorctl", 240, 0);
    let lib = h.file("usr/lib/libVendor.so.0", Some("libVendor.so.0"));
    h.file("bin/vendorBin", None);
    let config = h.config(&["vendor.com/device=myDevice"], "");

    let e = common::explain_json(&config, "cuda");
    assert!(
        e["plan"]["problems"].as_array().unwrap().is_empty(),
        "{e:#}"
    );
    let root = h.root();
    for (inside, outside) in [
        ("/dev/card1", root.join("vendorroot/dev/card1")),
        ("/dev/card2", root.join("dev/card2")),
        ("/dev/vendorctl", root.join("dev/vendorctl")),
    ] {
        assert_eq!(
            exposed(&e, inside, &outside),
            Some(("cdi".into(), "device-node".into())),
            "{inside}: {e:#}"
        );
    }
    assert_eq!(
        exposed(&e, "/run/opengl-driver/lib/libVendor.so.0", &lib),
        Some(("cdi".into(), "library".into()))
    );
    assert!(
        skipped_why(&e, "/bin/vendorBin").contains("FHS program"),
        "{e:#}"
    );
    let not_done = not_carried_out(&e);
    for want in [
        "FOO=CDI_SPEC",
        "BAR=BARVALUE1",
        "vendor-hook",
        "startContainer",
        "/dev/vendorctl",
    ] {
        assert!(
            not_done.iter().any(|n| n.contains(want)),
            "{want} not listed: {not_done:#?}"
        );
    }
    let errors = e["plan"]["skipped"].to_string();
    assert!(
        errors.contains("empty.json") && errors.contains("explicit-empty.json"),
        "{errors}"
    );

    let text = common::explain_output(&config, "cuda", false);
    assert!(text.contains("not carried out (5):"), "{text}");
    assert!(
        text.contains("CDI vendor.com/device=myDevice: env FOO=CDI_SPEC"),
        "{text}"
    );

    let (answer, manifest) = h.hook(&config);
    assert!(
        answer.contains(&format!(
            "/dev/card1={}",
            root.join("vendorroot/dev/card1").display()
        )),
        "{answer}"
    );
    assert!(!answer.contains("vendorBin"), "{answer}");
    assert_eq!(
        manifest.devices,
        ["/dev/card1", "/dev/card2", "/dev/vendorctl"]
    );

    // The lower directory's spec alone: the minimal one.
    std::fs::remove_file(h.path("specs/high/spec-example.json")).unwrap();
    let e = common::explain_json(&config, "cuda");
    assert!(exposed(&e, "/dev/card1", &root.join("dev/card1")).is_none());
    let problems = e["plan"]["problems"].to_string();
    assert!(problems.contains("device node /dev/card1"), "{problems}");
}

#[test]
fn an_nvidia_ctk_gpu_host_spec_gives_devices_libraries_and_the_driver_in_json_and_yaml() {
    if !root_available(
        "an_nvidia_ctk_gpu_host_spec_gives_devices_libraries_and_the_driver_in_json_and_yaml",
    ) {
        return;
    }
    let mut plans = Vec::new();
    for name in ["gpu-host.yaml", "gpu-host.json"] {
        let h = Host::new();
        h.spec("high", name, &fixture(name));
        h.nvidia_nodes();
        let libcuda = h.file(
            &format!("{LIBDIR}/libcuda.so.550.54.14"),
            Some("libcuda.so.1"),
        );
        let nvml = h.file(
            &format!("{LIBDIR}/libnvidia-ml.so.550.54.14"),
            Some("libnvidia-ml.so.1"),
        );
        let cuvid = h.file(
            &format!("{LIBDIR}/libnvcuvid.so.550.54.14"),
            Some("libnvcuvid.so.1"),
        );
        h.file(&format!("{LIBDIR}/libc.so.6"), Some("libc.so.6"));
        let icd = h.file("usr/share/vulkan/icd.d/nvidia_icd.json", None);
        h.file("usr/bin/nvidia-smi", None);
        let config = h.config(&["nvidia.com/gpu=all"], "[rule.driver]\ncompat = []\n");
        let e = common::explain_json(&config, "cuda");
        assert!(
            e["plan"]["problems"].as_array().unwrap().is_empty(),
            "{e:#}"
        );
        let root = h.root();
        for node in ["nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] {
            let inside = format!("/dev/{node}");
            assert!(
                exposed(&e, &inside, &root.join(&inside[1..])).is_some(),
                "{inside}"
            );
        }
        let spec = h.path(&format!("specs/high/{name}"));
        for (inside, outside, capability) in [
            ("libcuda.so.1", &libcuda, "compute"),
            ("libcuda.so.550.54.14", &libcuda, "compute"),
            ("libnvidia-ml.so.1", &nvml, "utility"),
            ("libnvcuvid.so.1", &cuvid, "video"),
        ] {
            let inside = format!("/run/opengl-driver/lib/{inside}");
            let from_spec = format!(
                "host-library ({capability}) from CDI spec {}",
                spec.display()
            );
            assert_eq!(
                exposed(&e, &inside, outside),
                Some(("driver".into(), from_spec)),
                "{inside}: {e:#}"
            );
        }
        // create-symlinks' libcuda.so, and the ICD file under the link's share.
        assert_eq!(
            exposed(&e, "/run/opengl-driver/lib/libcuda.so", &libcuda),
            Some(("cdi".into(), "link".into()))
        );
        assert_eq!(
            exposed(
                &e,
                "/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.json",
                &icd
            ),
            Some(("cdi".into(), "data-file".into()))
        );
        assert!(skipped_why(&e, "/usr/bin/nvidia-smi").contains("FHS program"));
        assert!(
            skipped_why(&e, &format!("/{LIBDIR}/libc.so.6")).contains("C/C++ runtime"),
            "{e:#}"
        );
        for x in exposures(&e) {
            assert!(
                !x.0.contains("libc.so") && !x.1.contains("libc.so"),
                "{x:?}"
            );
        }
        let not_done = not_carried_out(&e);
        for want in [
            "NVIDIA_VISIBLE_DEVICES=void",
            "update-ldcache",
            "mount-options",
        ] {
            assert!(
                not_done.iter().any(|n| n.contains(want)),
                "{want}: {not_done:#?}"
            );
        }
        let driver = &e["plan"]["driver"];
        assert_eq!(driver["kind"], "host", "{driver:#}");
        assert_eq!(driver["cuda_version"], "12.4", "{driver:#}");

        let (answer, manifest) = h.hook(&config);
        assert!(
            answer.contains("/run/opengl-driver/lib/libcuda.so.1="),
            "{answer}"
        );
        assert_eq!(manifest.driver.kind, DriverKind::Host);
        assert!(manifest.devices.contains(&"/dev/nvidia0".to_string()));
        // The same plan from either format, but for where the spec is.
        let text = serde_json::to_string(&e["plan"]["exposures"])
            .unwrap()
            .replace(&h.dir.path().display().to_string(), "")
            .replace(name, "SPEC");
        plans.push(text);
    }
    assert_eq!(plans[0], plans[1]);
}

#[test]
fn a_spec_host_driver_gives_way_to_a_newer_compat_driver() {
    if !root_available("a_spec_host_driver_gives_way_to_a_newer_compat_driver") {
        return;
    }
    let h = Host::new();
    h.spec("high", "gpu-host.yaml", &fixture("gpu-host.yaml"));
    h.nvidia_nodes();
    h.file(
        &format!("{LIBDIR}/libcuda.so.550.54.14"),
        Some("libcuda.so.1"),
    );
    let compat = h.root().join("usr/local/cuda-12.8/compat");
    let compat_cuda = h.file(
        &compat.join("libcuda.so.570.86.10").display().to_string(),
        Some("libcuda.so.1"),
    );
    cuda_sandbox_testkit::add_compat_note(
        &compat_cuda,
        r#"{"cuda_version":"12.8","kernel_driver_branches":["550"]}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink("libcuda.so.570.86.10", compat.join("libcuda.so.1")).unwrap();
    std::fs::create_dir_all(h.root().join("proc/driver/nvidia")).unwrap();
    std::fs::write(
        h.root().join("proc/driver/nvidia/version"),
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Jan 1 (FAKE)\n",
    )
    .unwrap();
    let config = h.config(
        &["nvidia.com/gpu=0"],
        "[rule.driver]\ncompat = [\"/usr/local/cuda*/compat\"]\n",
    );
    let e = common::explain_json(&config, "cuda");
    let driver = &e["plan"]["driver"];
    assert_eq!(driver["kind"], "compat", "{driver:#}");
    assert_eq!(
        exposed(
            &e,
            "/run/opengl-driver/lib/libcuda.so.1",
            &compat.join("libcuda.so.1")
        ),
        Some(("driver".into(), "compat-at-driver-link".into())),
        "{e:#}"
    );
    let libcuda = h.root().join(LIBDIR).join("libcuda.so.550.54.14");
    assert!(skipped_why(&e, &libcuda.display().to_string()).contains("replaced by the compat"));
}

#[test]
fn a_mig_device_gets_its_gpu_and_its_capability_nodes_under_either_name() {
    if !root_available("a_mig_device_gets_its_gpu_and_its_capability_nodes_under_either_name") {
        return;
    }
    let h = Host::new();
    h.spec("high", "mig.yaml", &fixture("mig.yaml"));
    h.nvidia_nodes();
    h.node("dev/nvidia-caps/nvidia-cap21", 511, 21);
    h.node("dev/nvidia-caps/nvidia-cap22", 511, 22);
    h.node("dev/nvidia-caps/nvidia-cap1", 511, 1);
    for name in [
        "nvidia.com/gpu=0:0",
        "nvidia.com/gpu=MIG-a4d2e8b9-5b1f-5c3d-8f2a-3a1c0e7b9d11",
    ] {
        let config = h.config(&[name], "");
        let (_, manifest) = h.hook(&config);
        assert_eq!(
            manifest.devices,
            [
                "/dev/nvidia-caps/nvidia-cap21",
                "/dev/nvidia-caps/nvidia-cap22",
                "/dev/nvidia-uvm",
                "/dev/nvidia0",
                "/dev/nvidiactl",
            ],
            "{name}"
        );
    }
    let config = h.config(&["nvidia.com/gpu=1:0"], "");
    let e = common::explain_json(&config, "cuda");
    let problems = e["plan"]["problems"].to_string();
    assert!(
        problems.contains("defines nvidia.com/gpu=1:0"),
        "{problems}"
    );
}

#[test]
fn a_nixos_spec_brings_store_closures_and_leaves_fhs_programs_out() {
    if !root_available("a_nixos_spec_brings_store_closures_and_leaves_fhs_programs_out") {
        return;
    }
    let h = Host::new();
    h.spec(
        "high",
        "nvidia-container-toolkit.json",
        &fixture("nixos.json"),
    );
    h.nvidia_nodes();
    let driver = h.path("store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nvidia-x11-550.54.14");
    let libcuda = h.file(
        &driver
            .join("lib/libcuda.so.550.54.14")
            .display()
            .to_string(),
        Some("libcuda.so.1"),
    );
    h.file(
        &h.path("store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-nvidia-x11-550.54.14-bin/bin/nvidia-smi")
            .display()
            .to_string(),
        None,
    );
    // No driver link on this host: the spec's libraries are bound at the link's place.
    let config = h.config(&["nvidia.com/gpu=all"], "[rule.driver]\ncompat = []\n");
    let e = common::explain_json(&config, "cuda");
    assert!(
        e["plan"]["problems"].as_array().unwrap().is_empty(),
        "{e:#}"
    );
    assert!(
        exposed(&e, "/run/opengl-driver/lib/libcuda.so.1", &libcuda).is_some(),
        "{e:#}"
    );
    assert!(skipped_why(&e, "/usr/bin/nvidia-smi").contains("FHS program"));
    // The store path's closure comes with it.
    assert_eq!(
        exposed(&e, &driver.display().to_string(), &driver),
        Some(("closure-member".into(), String::new())),
        "{e:#}"
    );
    assert!(not_carried_out(&e)
        .iter()
        .any(|n| n.contains("update-ldcache")));
}

#[test]
fn untrusted_spec_directories_give_nothing() {
    if !root_available("untrusted_spec_directories_give_nothing") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let h = Host::new();
    h.spec("high", "gpu-host.yaml", &fixture("gpu-host.yaml"));
    h.nvidia_nodes();
    std::fs::set_permissions(h.path("specs/high"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = h.config(&["nvidia.com/gpu=all"], "");
    let e = common::explain_json(&config, "cuda");
    assert!(exposures(&e).iter().all(|x| x.2 != "cdi"), "{e:#}");
    assert!(e["plan"]["skipped"]
        .to_string()
        .contains("writable by group or others"));
    assert!(e["verdict"].as_str().unwrap().starts_with("FAILS"), "{e:#}");
}

#[test]
fn a_sandboxed_build_gets_what_the_cdi_test_spec_lists_with_closures_and_relocated_libraries() {
    let name =
        "a_sandboxed_build_gets_what_the_cdi_test_spec_lists_with_closures_and_relocated_libraries";
    if !nix_available(name) || !testdata_available(name) {
        return;
    }
    let h = Host::new();
    h.spec(
        "high",
        "spec-example.json",
        &std::fs::read_to_string(Path::new(CDI_TESTDATA).join("good/spec-example.json")).unwrap(),
    );
    h.node("vendorroot/dev/card1", 226, 1);
    h.node("dev/card2", 226, 2);
    h.node("dev/vendorctl", 240, 0);
    h.file("usr/lib/libVendor.so.0", Some("libVendor.so.0"));
    h.file("bin/vendorBin", None);
    // The real store and nix-store: a store path a spec mounts brings its closure.
    let config = h.config(
        &["vendor.com/device=myDevice", "vendor.com/store=driver"],
        "",
    );
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace(
            &format!("store_dir = \"{}\"\n", h.path("store").display()),
            "",
        )
        .replace(
            &format!("nix_store = \"{}\"\n", h.path("nix-store").display()),
            "",
        );
    std::fs::write(&config, text).unwrap();
    let sandbox = NixSandbox::with_hook(Path::new(HOOK), &config);
    let driver = sandbox.build(
        &common::nix_file("driver-store.nix"),
        &[("nonce", &nonce())],
        &[],
    );
    assert!(
        driver.ok(),
        "building the fake driver failed:\n{}",
        driver.log
    );
    let driver = driver.out_paths[0].clone();
    let closure =
        cuda_sandbox_elfkit::requisites(Path::new("nix-store"), &driver).expect("closure");
    assert!(closure.len() >= 3, "{closure:?}");
    h.spec(
        "high",
        "store.yaml",
        &format!(
            "cdiVersion: 0.5.0\nkind: vendor.com/store\ndevices:\n- name: driver\n  \
             containerEdits:\n    mounts:\n    - hostPath: {}/lib/libcuda.so.1\n      \
             containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.1\n",
            driver.display()
        ),
    );
    let read: Vec<String> = closure.iter().map(|p| p.display().to_string()).collect();
    let build = sandbox.build(
        &common::nix_file("cdi-probe.nix"),
        &[("nonce", &nonce()), ("readPaths", &read.join(" "))],
        &[],
    );
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let r = std::fs::read_to_string(&build.out_paths[0]).unwrap();
    for line in [
        "char /dev/card1 226:1",
        "char /dev/card2 226:2",
        "char /dev/vendorctl 240:0",
        "file /run/opengl-driver/lib/libVendor.so.0 .ELF",
        "file /run/opengl-driver/lib/libcuda.so.1 FAKE libcuda",
        "absent /bin/vendorBin",
    ] {
        assert!(r.contains(line), "the build lacks {line:?}:\n{r}");
    }
    for member in &read {
        assert!(
            r.contains(&format!("read {member}\n")),
            "closure member {member}:\n{r}"
        );
    }
    assert!(r.contains("\"/dev/card1\""), "manifest devices:\n{r}");
}

#[test]
fn with_gpus_per_build_a_cdi_rule_leases_one_gpu_of_those_its_spec_lists() {
    if !root_available("with_gpus_per_build_a_cdi_rule_leases_one_gpu_of_those_its_spec_lists") {
        return;
    }
    let h = Host::new();
    h.spec(
        "high",
        "two.yaml",
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n\
         - name: all\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n    - path: /dev/nvidia1\n\
         containerEdits:\n  deviceNodes:\n  - path: /dev/nvidiactl\n",
    );
    h.nvidia_nodes();
    h.node("dev/nvidia1", 195, 1);
    let config = h.config(&["nvidia.com/gpu=all"], "");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("gpus_per_build = 1\n{text}")).unwrap();
    let (answer, manifest) = h.hook(&config);
    assert_eq!(manifest.leased_gpus.len(), 1, "{manifest:?}");
    let gpus: Vec<&String> = manifest
        .devices
        .iter()
        .filter(|d| d.starts_with("/dev/nvidia") && d[11..].bytes().all(|b| b.is_ascii_digit()))
        .collect();
    assert_eq!(gpus.len(), 1, "{manifest:?}");
    assert!(answer.contains("/dev/nvidiactl="), "{answer}");
}

/// The fix the NixOS module's rule (`programs.cuda-sandbox.cdi.enable`) gives for a missing
/// spec, as nixos-module/default.nix renders it (nix-tests/module-eval.nix checks the module
/// renders this very text).
const NIXOS_CDI_HINT: &str = "start the unit that writes /run/cdi/nvidia-container-toolkit.json: \
     systemctl start nvidia-container-toolkit-cdi-generator.service (journalctl -u \
     nvidia-container-toolkit-cdi-generator says why it did not run; it needs \
     hardware.nvidia-container-toolkit.enable)";

/// A script that runs `program` (the hook) in a private mount namespace whose `/run` is a
/// fresh root-owned tmpfs holding `/run/cdi` (mode 0755, as systemd's `RuntimeDirectory`
/// makes it) and, when `spec` is given, that file as `/run/cdi/nvidia-container-toolkit.json`:
/// the spec directory the hook reads by default is the test's own, never the host's.
fn with_private_run_cdi(dir: &Path, program: &Path, spec: Option<&Path>) -> PathBuf {
    let copy = spec.map_or_else(String::new, |s| {
        format!(
            " && cp {} /run/cdi/nvidia-container-toolkit.json",
            s.display()
        )
    });
    let wrapper = dir.join("hook-in-namespace");
    write_script(
        &wrapper,
        &format!(
            "#!/bin/sh\nexec unshare --mount --propagation private /bin/sh -c \
             'mount -t tmpfs -o mode=755 cdi-test /run && mkdir -m 755 /run/cdi{copy} && \
             exec {} \"$@\"' hook \"$@\"\n",
            program.display()
        ),
    )
    .unwrap();
    wrapper
}

/// The NixOS module's rule with `programs.cuda-sandbox.cdi.enable`, as rendered (less the
/// Jetson globs, which match nothing on a discrete host), on the host root `h`; the spec
/// directories are the built-in ones (`/etc/cdi`, `/var/run/cdi`, `/run/cdi`). The module's
/// own rendering of this rule is fed to the hook against the same specs by
/// nix-tests/fake-host-explain (cases `cdi-toolkit`, `cdi-leased`).
fn nixos_cdi_config(h: &Host, store: Option<&Path>, driver: bool) -> PathBuf {
    let p = h.path("nixos.toml");
    let store = store.map_or_else(String::new, |s| {
        format!(
            "store_dir = \"{}\"\nnix_store = \"{}\"\n",
            s.display(),
            h.path("nix-store").display()
        )
    });
    let driver = if driver {
        "[rule.driver]\nlink = \"/run/opengl-driver\"\nrequired = true\nhost_libraries = false\ncompat = []\n"
    } else {
        ""
    };
    std::fs::write(
        &p,
        format!(
            "host_root = \"{root}\"\n{store}runtime_dir = \"{run}\"\nclosure_cache = \"{cache}\"\n\
             [[rule]]\nname = \"nvidia\"\nfeatures = [\"cuda\"]\ncdi = [\"nvidia.com/gpu=all\"]\n\
             cdi_hint = \"{NIXOS_CDI_HINT}\"\n{driver}",
            root = h.root().display(),
            run = h.path("run").display(),
            cache = h.path("cache").display(),
        ),
    )
    .unwrap();
    write_script(
        &h.path("nix-store"),
        "#!/bin/sh\nshift 2\nfor p in \"$@\"; do echo \"$p\"; done\n",
    )
    .unwrap();
    p
}

/// `explain --json --features cuda` of `config`, run through `wrapper`.
fn explain_through(wrapper: &Path, config: &Path) -> Value {
    let out = Command::new(wrapper)
        .args(["explain", "--json", "--features", "cuda", "--config"])
        .arg(config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "explain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The generator-shaped spec with its driver at `driver` and its programs at `driver_bin`.
fn nixos_toolkit_spec(h: &Host, driver: &Path, driver_bin: &Path) -> PathBuf {
    generator_spec(h, "nixos-toolkit.json", driver, driver_bin)
}

/// The generator-shaped spec `file` of `tests/cdi/` with its driver at `driver` and its
/// programs at `driver_bin`.
fn generator_spec(h: &Host, file: &str, driver: &Path, driver_bin: &Path) -> PathBuf {
    let text = fixture(file)
        .replace("@DRIVER_BIN@", &driver_bin.display().to_string())
        .replace("@DRIVER@", &driver.display().to_string())
        .replace("@STORE@", &h.path("store").display().to_string());
    let p = h.path("nvidia-container-toolkit.json");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn the_spec_nixos_generates_in_run_cdi_gives_the_modules_rule_its_nodes_and_driver() {
    let name = "the_spec_nixos_generates_in_run_cdi_gives_the_modules_rule_its_nodes_and_driver";
    if !root_available(name) {
        return;
    }
    let h = Host::new();
    h.nvidia_nodes();
    h.node("dev/nvidia1", 195, 1);
    h.node("dev/nvidia-modeset", 195, 254);
    let store = h.path("store");
    let driver = store.join("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nvidia-x11-550.54.14");
    let driver_bin = store.join("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-nvidia-x11-550.54.14-bin");
    let lib = |file: &str, soname: &str| {
        h.file(
            &driver.join("lib").join(file).display().to_string(),
            Some(soname),
        )
    };
    let libcuda = lib("libcuda.so.550.54.14", "libcuda.so.1");
    let nvml = lib("libnvidia-ml.so.550.54.14", "libnvidia-ml.so.1");
    h.file(
        &driver_bin.join("bin/nvidia-smi").display().to_string(),
        None,
    );
    let spec = nixos_toolkit_spec(&h, &driver, &driver_bin);
    let config = nixos_cdi_config(&h, Some(&store), true);

    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), Some(&spec));
    let e = explain_through(&hook, &config);
    assert!(
        e["plan"]["problems"].as_array().unwrap().is_empty(),
        "{e:#}"
    );
    let root = h.root();
    for node in [
        "nvidia0",
        "nvidia1",
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ] {
        let inside = format!("/dev/{node}");
        assert_eq!(
            exposed(&e, &inside, &root.join(&inside[1..])),
            Some(("cdi".into(), "device-node".into())),
            "{inside}: {e:#}"
        );
    }
    // No driver link on this host: the spec's libraries are the host driver, bound at the
    // link under their file names and sonames; the spec found in /run/cdi (or /var/run/cdi,
    // where that is a link to /run: one directory, read once).
    let from_spec = |capability: &str| {
        let found = e["plan"]["exposures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["inside"] == "/run/opengl-driver/lib/libcuda.so.1")
            .map(|x| x["reason"]["source"].as_str().unwrap_or("").to_string())
            .unwrap_or_default();
        assert!(
            found.starts_with(&format!("host-library ({capability}) from CDI spec "))
                && found.ends_with("/run/cdi/nvidia-container-toolkit.json"),
            "{found}: {e:#}"
        );
    };
    from_spec("compute");
    for (inside, outside) in [
        ("/run/opengl-driver/lib/libcuda.so.1", &libcuda),
        ("/run/opengl-driver/lib/libcuda.so.550.54.14", &libcuda),
        ("/run/opengl-driver/lib/libnvidia-ml.so.1", &nvml),
    ] {
        assert!(
            exposed(&e, inside, outside).is_some_and(|(k, _)| k == "driver"),
            "{inside}: {e:#}"
        );
    }
    assert_eq!(e["plan"]["driver"]["kind"], "host", "{e:#}");
    assert!(skipped_why(&e, "/usr/bin/nvidia-smi").contains("FHS program"));
    let not_done = not_carried_out(&e);
    for want in [
        "NVIDIA_VISIBLE_DEVICES=void",
        "update-ldcache",
        "enable-cuda-compat",
        "rprivate",
    ] {
        assert!(
            not_done.iter().any(|n| n.contains(want)),
            "{want}: {not_done:#?}"
        );
    }

    // Before the unit has run: /run/cdi is empty, and the tagged build fails naming the unit.
    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), None);
    let e = explain_through(&hook, &config);
    assert!(e["verdict"].as_str().unwrap().starts_with("FAILS"), "{e:#}");
    // (The driver, which came from the spec, is missing too: a second problem.)
    let problems = e["plan"]["problems"].as_array().unwrap();
    let missing = problems
        .iter()
        .find(|p| {
            p["what"]
                .as_str()
                .unwrap()
                .contains("defines nvidia.com/gpu=all")
        })
        .unwrap_or_else(|| panic!("no missing-spec problem: {e:#}"));
    assert_eq!(missing["fix"], NIXOS_CDI_HINT, "{e:#}");
    assert!(
        exposures(&e).iter().all(|x| !x.0.starts_with("/dev/")),
        "no device without the spec: {e:#}"
    );
}

#[test]
fn a_sandboxed_build_gets_the_nodes_and_relocated_driver_of_the_spec_nixos_generates() {
    let name = "a_sandboxed_build_gets_the_nodes_and_relocated_driver_of_the_spec_nixos_generates";
    if !nix_available(name) {
        return;
    }
    let h = Host::new();
    h.nvidia_nodes();
    h.node("dev/nvidia1", 195, 1);
    h.node("dev/nvidia-modeset", 195, 254);
    let config = nixos_cdi_config(&h, None, false);
    let plain = NixSandbox::with_hook(Path::new(HOOK), &config);
    let driver = plain.build(
        &common::nix_file("driver-store.nix"),
        &[("nonce", &nonce())],
        &[],
    );
    assert!(
        driver.ok(),
        "building the fake driver failed:\n{}",
        driver.log
    );
    let driver = driver.out_paths[0].clone();
    // The real store's fake driver holds lib/libcuda.so.1 only: the spec mounts that.
    let spec = nixos_toolkit_spec(&h, &driver, &h.path("store/none-bin"));
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("lib/libcuda.so.550.54.14", "lib/libcuda.so.1");
    std::fs::write(&spec, text).unwrap();
    let closure =
        cuda_sandbox_elfkit::requisites(Path::new("nix-store"), &driver).expect("closure");
    let read: Vec<String> = closure.iter().map(|p| p.display().to_string()).collect();

    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), Some(&spec));
    let sandbox = NixSandbox::with_hook(&hook, &config);
    let build = sandbox.build(
        &common::nix_file("nixos-cdi-probe.nix"),
        &[("nonce", &nonce()), ("readPaths", &read.join(" "))],
        &[],
    );
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let r = std::fs::read_to_string(&build.out_paths[0]).unwrap();
    for line in [
        "char /dev/nvidia0 195:0",
        "char /dev/nvidia1 195:1",
        "char /dev/nvidiactl 195:255",
        "char /dev/nvidia-modeset 195:254",
        "char /dev/nvidia-uvm 235:0",
        "file /run/opengl-driver/lib/libcuda.so.1 FAKE libcuda",
        "absent /usr/bin/nvidia-smi",
    ] {
        assert!(r.contains(line), "the build lacks {line:?}:\n{r}");
    }
    for member in &read {
        assert!(
            r.contains(&format!("read {member}\n")),
            "closure member {member}:\n{r}"
        );
    }

    // Before the unit has run: the same build fails, naming the unit to start.
    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), None);
    let sandbox = NixSandbox::with_hook(&hook, &config);
    let build = sandbox.build(
        &common::nix_file("nixos-cdi-probe.nix"),
        &[("nonce", &nonce())],
        &[],
    );
    assert!(
        !build.ok(),
        "a build without the spec succeeded:\n{}",
        build.log
    );
    assert!(
        build
            .log
            .contains("systemctl start nvidia-container-toolkit-cdi-generator.service"),
        "{}",
        build.log
    );
}

/// The nodes of `tests/cdi/nixos-two-gpus.json`'s GPU `n`, as the DRM driver numbers them
/// (`/dev/dri/card<n+1>`, `/dev/dri/renderD<128+n>`, major 226), with the GPU's own node.
fn own_nodes_of_gpu(n: u64) -> [(String, u64, u64); 3] {
    [
        (format!("dev/nvidia{n}"), 195, n),
        (format!("dev/dri/card{}", n + 1), 226, n + 1),
        (format!("dev/dri/renderD{}", 128 + n), 226, 128 + n),
    ]
}

/// A host with two GPUs and their DRM nodes, the control nodes of the spec, and the spec.
fn two_gpu_host(h: &Host, driver: &Path, driver_bin: &Path) -> PathBuf {
    h.nvidia_nodes();
    h.node("dev/nvidia-modeset", 195, 254);
    for n in 0..2 {
        for (rel, major, minor) in own_nodes_of_gpu(n) {
            if !h.root().join(&rel).exists() {
                h.node(&rel, major, minor);
            }
        }
    }
    generator_spec(h, "nixos-two-gpus.json", driver, driver_bin)
}

/// `config` with `gpus_per_build = 1` first.
fn with_one_gpu_per_build(config: &Path) {
    let text = std::fs::read_to_string(config).unwrap();
    std::fs::write(config, format!("gpus_per_build = 1\n{text}")).unwrap();
}

#[test]
fn with_leases_the_device_all_gives_a_build_only_its_gpus_own_nodes_of_the_spec_nixos_generates() {
    let name = "with_leases_the_device_all_gives_a_build_only_its_gpus_own_nodes_of_the_spec_nixos_generates";
    if !root_available(name) {
        return;
    }
    let h = Host::new();
    let store = h.path("store");
    let driver = store.join("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nvidia-x11-550.54.14");
    h.file(
        &driver
            .join("lib/libcuda.so.550.54.14")
            .display()
            .to_string(),
        Some("libcuda.so.1"),
    );
    let spec = two_gpu_host(&h, &driver, &store.join("none-bin"));
    let config = nixos_cdi_config(&h, Some(&store), true);
    with_one_gpu_per_build(&config);
    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), Some(&spec));

    // A first build is leased GPU 0 and gets its own nodes only; it holds the lease while
    // this test runs, so a build now is leased GPU 1.
    let (answer, manifest) = h.hook_through(&hook, &config, "first");
    assert_eq!(manifest.leased_gpus, [0], "{manifest:?}");
    for (rel, _, _) in own_nodes_of_gpu(0) {
        assert!(answer.contains(&format!("/{rel}=")), "{rel}: {answer}");
    }
    for (rel, _, _) in own_nodes_of_gpu(1) {
        assert!(!answer.contains(&format!("/{rel}=")), "{rel}: {answer}");
    }

    let e = explain_through(&hook, &config);
    assert!(
        e["plan"]["problems"].as_array().unwrap().is_empty(),
        "{e:#}"
    );
    assert_eq!(e["plan"]["leased_gpus"], serde_json::json!([1]), "{e:#}");
    let root = h.root();
    let reason_of = |inside: &str| {
        e["plan"]["exposures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["inside"] == inside)
            .map(|x| (x["reason"]["device"].clone(), x["reason"]["gpu"].clone()))
    };
    for (rel, _, _) in own_nodes_of_gpu(1) {
        let inside = format!("/{rel}");
        assert_eq!(
            exposed(&e, &inside, &root.join(&rel)),
            Some(("cdi".into(), "device-node".into())),
            "{inside}: {e:#}"
        );
        assert_eq!(
            reason_of(&inside),
            Some((serde_json::json!("nvidia.com/gpu=1"), serde_json::json!(1))),
            "{inside}: {e:#}"
        );
    }
    // The spec-wide nodes reach every build; the driver comes from the spec-wide mounts.
    for node in [
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ] {
        let inside = format!("/dev/{node}");
        assert_eq!(
            reason_of(&inside),
            Some((serde_json::json!("nvidia.com/gpu=all"), Value::Null)),
            "{inside}: {e:#}"
        );
    }
    assert!(
        exposed(
            &e,
            "/run/opengl-driver/lib/libcuda.so.1",
            &driver.join("lib/libcuda.so.550.54.14")
        )
        .is_some(),
        "{e:#}"
    );
    // GPU 0's own nodes reach no other build: each is named as another build's GPU.
    for (rel, _, _) in own_nodes_of_gpu(0) {
        let inside = format!("/{rel}");
        assert!(reason_of(&inside).is_none(), "{inside}: {e:#}");
        assert!(
            skipped_why(&e, &inside).starts_with("another build's GPU"),
            "{inside}: {e:#}"
        );
    }
    // What GPU 1's device lists and cannot be carried out is listed; GPU 0's is not.
    let not_done = not_carried_out(&e).join("\n");
    assert!(not_done.contains("pci-0000:86:00.0-card"), "{not_done}");
    assert!(!not_done.contains("pci-0000:3b:00.0-card"), "{not_done}");

    // Without leases every build gets both GPUs' nodes, as `all` lists them.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replacen("gpus_per_build = 1\n", "", 1)).unwrap();
    let e = explain_through(&hook, &config);
    for n in 0..2 {
        for (rel, _, _) in own_nodes_of_gpu(n) {
            let inside = format!("/{rel}");
            assert!(
                exposed(&e, &inside, &root.join(&rel)).is_some(),
                "{inside}: {e:#}"
            );
        }
    }
}

#[test]
fn with_leases_a_sandboxed_build_sees_only_its_gpus_nodes_of_the_spec_nixos_generates() {
    let name = "with_leases_a_sandboxed_build_sees_only_its_gpus_nodes_of_the_spec_nixos_generates";
    if !nix_available(name) {
        return;
    }
    let h = Host::new();
    let config = nixos_cdi_config(&h, None, false);
    let plain = NixSandbox::with_hook(Path::new(HOOK), &config);
    let driver = plain.build(
        &common::nix_file("driver-store.nix"),
        &[("nonce", &nonce())],
        &[],
    );
    assert!(
        driver.ok(),
        "building the fake driver failed:\n{}",
        driver.log
    );
    let driver = driver.out_paths[0].clone();
    let spec = two_gpu_host(&h, &driver, &h.path("store/none-bin"));
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("lib/libcuda.so.550.54.14", "lib/libcuda.so.1");
    std::fs::write(&spec, text).unwrap();
    with_one_gpu_per_build(&config);
    let hook = with_private_run_cdi(h.dir.path(), Path::new(HOOK), Some(&spec));
    // GPU 0 is leased to another build while this one runs.
    let (_, first) = h.hook_through(&hook, &config, "first");
    assert_eq!(first.leased_gpus, [0], "{first:?}");

    let sandbox = NixSandbox::with_hook(&hook, &config);
    let build = sandbox.build(
        &common::nix_file("nixos-cdi-probe.nix"),
        &[("nonce", &nonce())],
        &[],
    );
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let r = std::fs::read_to_string(&build.out_paths[0]).unwrap();
    for line in [
        "char /dev/nvidia1 195:1",
        "char /dev/dri/card2 226:2",
        "char /dev/dri/renderD129 226:129",
        "char /dev/nvidiactl 195:255",
        "char /dev/nvidia-uvm 235:0",
        "file /run/opengl-driver/lib/libcuda.so.1 FAKE libcuda",
        "absent /dev/nvidia0",
        "absent /dev/dri/card1",
        "absent /dev/dri/renderD128",
    ] {
        assert!(r.contains(line), "the build lacks {line:?}:\n{r}");
    }
}

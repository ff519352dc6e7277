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

#[path = "../common/mod.rs"]
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

// The tests, one module per tier (docs/testing.md).
mod root;
mod sandbox;

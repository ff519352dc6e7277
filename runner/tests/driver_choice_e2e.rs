//! The hook's driver choice end to end: a fake host root (real character devices, a fake
//! `/proc/driver/nvidia/version`, FAKE drivers in the Nix store or behind a fake
//! `ld.so.cache`), the real `cuda-sandbox-hook` as Nix's `pre-build-hook`, and
//! `cuda-sandbox-check` as the builder of a tagged derivation in a real Nix sandbox. The
//! runner reads the manifest the hook wrote and checks that the libcuda the loader picked is
//! the one the hook chose.
//!
//! Tests that build with Nix need root and `nix-build` (skipped with a reason otherwise, and
//! failing under `CI=true`); the explain-only test needs neither.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{artifacts_dir, report_facts};
use cuda_sandbox_check::checks::driver::LibraryFacts;
use cuda_sandbox_testkit::{
    nix_available, nonce, workspace_binary, Build, FakeDevices, NixSandbox,
};
use fake_driver::layout::{add_compat_note, version_libcuda};
use fake_driver::sidecar::format_cuda_version;
use fake_driver::{assemble, FakeLibrary, Sidecar, DRIVER_LIBRARIES, LIBCUDA, SIDECAR_NAME};
use serde_json::Value;

const LINK_LIB: &str = "/run/opengl-driver/lib";

fn nix_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/nix")
        .join(name)
}

/// Assembles a FAKE driver directory at `dir`: `libraries` playing `sidecar`, libcuda installed
/// as `libcuda.so.<libcuda_version>` with the `libcuda.so.1` link, and with the compat note
/// listing `note_drivers` when given.
fn fake_driver_dir(
    dir: &Path,
    sidecar: &Sidecar,
    libraries: &[FakeLibrary],
    libcuda_version: &str,
    note_drivers: Option<&[u32]>,
) {
    if let Err(e) = assemble(&artifacts_dir(), dir, libraries, sidecar) {
        panic!("cannot assemble a fake driver: {e}");
    }
    let file = version_libcuda(dir, libcuda_version).unwrap();
    if let Some(drivers) = note_drivers {
        add_compat_note(&file, &format_cuda_version(sidecar.cuda_version), drivers).unwrap();
    }
}

/// A fake host: its root (devices, kernel module version), a hook config, and scratch space.
struct Host {
    _temp: tempfile::TempDir,
    scratch: PathBuf,
    root: PathBuf,
    config: PathBuf,
    devices: bool,
}

impl Host {
    /// A host root with NVIDIA kernel module `kernel`, and (when `devices`) GPU 0, nvidiactl
    /// and nvidia-uvm as real character devices.
    fn new(kernel: &str, devices: bool) -> Host {
        let temp = tempfile::tempdir().unwrap();
        let scratch = temp.path().to_path_buf();
        let root = scratch.join("root");
        if devices {
            FakeDevices::create(&root, 1, true).unwrap();
        }
        let proc = root.join("proc/driver/nvidia");
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::write(
            proc.join("version"),
            format!(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {kernel}  Thu Jan  1 00:00:00 UTC 2024\n\
                 GCC version:  gcc version 12.2.0 (FAKE)\n"
            ),
        )
        .unwrap();
        Host {
            config: scratch.join("config.toml"),
            _temp: temp,
            scratch,
            root,
            devices,
        }
    }

    /// Writes the hook config: this host's root, one `cuda` rule with the devices, and
    /// `driver_toml` (the `[rule.driver]` table and anything else for the rule).
    fn configure(&self, driver_toml: &str) {
        let devices = if self.devices {
            ["/dev/nvidia[0-9]*", "/dev/nvidiactl", "/dev/nvidia-uvm"]
                .iter()
                .map(|g| format!("[[rule.device]]\nglob = \"{g}\"\nrequired = true\n"))
                .collect::<String>()
        } else {
            String::new()
        };
        std::fs::write(
            &self.config,
            format!(
                "host_root = \"{root}\"\nclosure_cache = \"{s}/cache\"\nruntime_dir = \"{s}/run\"\n\
                 [[rule]]\nname = \"nvidia\"\nfeatures = [\"cuda\"]\n{devices}{driver_toml}",
                root = self.root.display(),
                s = self.scratch.display(),
            ),
        )
        .unwrap();
    }

    /// `cuda-sandbox-hook explain --features cuda` for this host, as text and as JSON.
    fn explain(&self) -> (String, Value) {
        let hook = workspace_binary("cuda-sandbox-hook");
        let run = |json: bool| {
            let mut cmd = Command::new(&hook);
            cmd.arg("explain")
                .arg("--config")
                .arg(&self.config)
                .args(["--features", "cuda"]);
            if json {
                cmd.arg("--json");
            }
            let out = cmd.output().unwrap();
            assert!(
                out.status.success(),
                "explain failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let json = serde_json::from_str(&run(true)).unwrap();
        (run(false), json)
    }

    /// Nix with the real hook reading this host's config.
    fn sandbox(&self) -> NixSandbox {
        NixSandbox::with_hook(&workspace_binary("cuda-sandbox-hook"), &self.config)
    }

    /// Builds the fake drivers into the store (a closure of two paths each) and points this
    /// host's `/run/opengl-driver` at the host one. Returns (host, compat) store paths.
    fn install_store_drivers(
        &self,
        host_dir: &Path,
        compat_dir: Option<&Path>,
    ) -> (PathBuf, Option<PathBuf>) {
        let host_arg = host_dir.display().to_string();
        let compat_arg = compat_dir.map(|d| d.display().to_string());
        let mut args = vec![("host", host_arg.as_str())];
        if let Some(c) = &compat_arg {
            args.push(("compat", c.as_str()));
        }
        let build = self
            .sandbox()
            .build(&nix_file("fake-driver-store.nix"), &args, &[]);
        assert!(
            build.ok(),
            "building the fake drivers failed:\n{}",
            build.log
        );
        let named = |part: &str| {
            build
                .out_paths
                .iter()
                .find(|p| p.to_string_lossy().contains(part))
                .cloned()
        };
        let host = named("-fake-nvidia-driver").expect("host driver store path");
        std::fs::create_dir_all(self.root.join("run")).unwrap();
        std::os::unix::fs::symlink(&host, self.root.join("run/opengl-driver")).unwrap();
        (host, named("-fake-cuda-compat"))
    }

    /// Builds the tagged runner derivation finding libcuda through `library_path`.
    fn check(&self, library_path: &str, expect_driver: &str) -> Build {
        let mut sandbox = self.sandbox();
        // Only what the dynamically linked runner needs: everything else comes from the hook.
        sandbox.sandbox_paths = ["/lib", "/lib64"]
            .iter()
            .filter(|p| Path::new(p).exists())
            .map(|p| p.to_string())
            .collect();
        let runner = common::RUNNER;
        sandbox.build(
            &nix_file("driver-choice.nix"),
            &[
                ("runner", runner),
                ("nonce", &nonce()),
                ("libraryPath", library_path),
                ("expectDriver", expect_driver),
            ],
            &[],
        )
    }
}

/// The runner's report from a successful build.
fn report(build: &Build) -> Value {
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    serde_json::from_str(&std::fs::read_to_string(&build.out_paths[0]).unwrap()).unwrap()
}

/// Asserts every GPU check passed (the runtime check is skipped: a driver has no cudart).
fn assert_all_pass(report: &Value) {
    for check in [
        "devices::nodes",
        "driver::library",
        "driver::version",
        "driver::entry_points",
        "kernel::saxpy",
        "nvml::consistency",
    ] {
        assert_eq!(
            report["checks"][check]["verdict"], "pass",
            "{check}: {report:#}"
        );
    }
    assert_eq!(
        report["checks"]["runtime::entry_points"]["verdict"],
        "skipped"
    );
    assert_eq!(report["summary"]["exit_code"], 0);
}

fn message<'a>(report: &'a Value, check: &str) -> &'a str {
    report["checks"][check]["message"]
        .as_str()
        .unwrap_or_default()
}

/// Every exposure's inside path, from `explain --json`.
fn exposed(explain: &Value) -> Vec<String> {
    explain["plan"]["exposures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["inside"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn nixos_link_host_driver_passes() {
    if !nix_available("nixos_link_host_driver_passes") {
        return;
    }
    let host = Host::new("535.104.05", true);
    let files = host.scratch.join("host-driver");
    fake_driver_dir(
        &files,
        &Sidecar::default(),
        &DRIVER_LIBRARIES,
        "535.104.05",
        None,
    );
    let (store, _) = host.install_store_drivers(&files, None);
    host.configure("[rule.driver]\n");

    let (_, explain) = host.explain();
    let driver = &explain["plan"]["driver"];
    assert_eq!(driver["kind"], "host", "{explain:#}");
    assert_eq!(driver["cuda_version"], "12.2", "{explain:#}");
    assert_eq!(driver["kernel_driver"], "535.104.05");
    let closure: Vec<String> =
        cuda_sandbox_elfkit::requisites(Path::new("nix-store"), Path::new(&store))
            .unwrap()
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
    assert!(closure.len() >= 2, "the fake driver's closure: {closure:?}");
    let inside = exposed(&explain);
    for member in &closure {
        assert!(inside.contains(member), "{member} not exposed: {inside:?}");
    }

    let report = report(&host.check(LINK_LIB, "host"));
    assert_all_pass(&report);
    let library: LibraryFacts = report_facts(&report, "driver::library");
    assert_eq!(
        library.path,
        Path::new("/run/opengl-driver/lib/libcuda.so.1")
    );
    assert!(message(&report, "driver::library").contains("the host driver the hook chose"));
    assert_eq!(report["manifest"]["status"], "loaded", "{report:#}");
    assert_eq!(report["manifest"]["content"]["driver"]["kind"], "host");
    assert!(report["manifest"]["content"]["devices"]
        .as_array()
        .unwrap()
        .contains(&Value::from("/dev/nvidia0")));
}

/// A Jetson-like host: kernel module 470 (CUDA 11.4), the host driver behind the driver link,
/// and a cuda_compat 12.2 store path whose note lists 470. Returns the host and the compat
/// directory (a store path's `compat`).
fn jetson() -> (Host, String) {
    let host = Host::new("470.82.01", true);
    std::fs::create_dir_all(host.root.join("etc")).unwrap();
    std::fs::write(
        host.root.join("etc/nv_tegra_release"),
        "# R32 (release), REVISION: 7.1, GCID: 0, BOARD: t186ref, EABI: aarch64 (FAKE)\n",
    )
    .unwrap();
    let host_files = host.scratch.join("host-driver");
    let on_470 = Sidecar {
        cuda_version: 11040,
        kernel_driver: "470.82.01".into(),
        ..Sidecar::default()
    };
    fake_driver_dir(&host_files, &on_470, &DRIVER_LIBRARIES, "470.82.01", None);
    let compat_files = host.scratch.join("compat");
    let compat_12_2 = Sidecar {
        cuda_version: 12020,
        ..on_470
    };
    fake_driver_dir(
        &compat_files,
        &compat_12_2,
        &[LIBCUDA],
        "535.104.05",
        Some(&[470]),
    );
    let (_, compat) = host.install_store_drivers(&host_files, Some(&compat_files));
    let compat_dir = format!("{}/compat", compat.unwrap().display());
    host.configure(&format!("[rule.driver]\ncompat = [\"{compat_dir}\"]\n"));
    (host, compat_dir)
}

#[test]
fn jetson_compat_first_passes() {
    if !nix_available("jetson_compat_first_passes") {
        return;
    }
    let (host, compat_dir) = jetson();
    let (text, explain) = host.explain();
    let driver = &explain["plan"]["driver"];
    assert_eq!(driver["kind"], "compat", "{text}");
    assert_eq!(driver["compat_dir"], compat_dir.as_str());
    assert_eq!(driver["cuda_version"], "12.2");
    assert_eq!(driver["host_cuda_version"], "11.4");

    let report = report(&host.check(&format!("{compat_dir}:{LINK_LIB}"), "compat"));
    assert_all_pass(&report);
    let library: LibraryFacts = report_facts(&report, "driver::library");
    assert_eq!(
        library.path,
        PathBuf::from(format!("{compat_dir}/libcuda.so.1"))
    );
    assert!(
        message(&report, "driver::library").contains("the compat driver the hook chose"),
        "{report:#}"
    );
    assert!(message(&report, "driver::version").contains("CUDA 12.2"));
    assert!(message(&report, "nvml::consistency").contains("compat active"));
}

#[test]
fn jetson_driver_link_first_fails_with_runpath_fix() {
    if !nix_available("jetson_driver_link_first_fails_with_runpath_fix") {
        return;
    }
    let (host, compat_dir) = jetson();
    let build = host.check(&format!("{LINK_LIB}:{compat_dir}"), "");
    assert!(!build.ok(), "the driver link first passed:\n{}", build.log);
    let expected = format!(
        "loaded /run/opengl-driver/lib/libcuda.so.1 (host, CUDA 11.4) but the hook chose \
         compat {compat_dir}/libcuda.so.1 (CUDA 12.2): put the compat directory before the \
         driver link in DT_RUNPATH or LD_LIBRARY_PATH"
    );
    assert!(
        build
            .log
            .lines()
            .any(|l| l.trim_start_matches("driver::library: ") == expected),
        "the build log lacks {expected:?}:\n{}",
        build.log
    );
    assert!(
        build.log.contains(
            "the hook chose the compat driver (CUDA 12.2) but the loaded libcuda is the host's"
        ),
        "{}",
        build.log
    );
}

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
        !exposed(&json).iter().any(|p| p.contains("/compat")),
        "a rejected compat driver is exposed: {json:#}"
    );
}

#[test]
fn other_distro_ld_cache_libraries_pass_without_libc() {
    if !nix_available("other_distro_ld_cache_libraries_pass_without_libc") {
        return;
    }
    let host = Host::new("535.104.05", true);
    // A Debian-like root: the FAKE driver's real ELF files and a dummy libc.so.6 in the
    // multiarch directory, and the loader cache ldconfig makes from them.
    let libdir = host.root.join("usr/lib/x86_64-linux-gnu");
    let files = host.scratch.join("host-driver");
    assemble(
        &artifacts_dir(),
        &files,
        &DRIVER_LIBRARIES,
        &Sidecar::default(),
    )
    .unwrap();
    std::fs::create_dir_all(&libdir).unwrap();
    for name in ["libcuda.so.1", "libnvidia-ml.so.1", SIDECAR_NAME] {
        std::fs::copy(files.join(name), libdir.join(name)).unwrap();
    }
    let src = host.scratch.join("libc.c");
    std::fs::write(&src, "int not_the_host_libc(void) { return 0; }\n").unwrap();
    let ok = Command::new("cc")
        .args([
            "-shared",
            "-fPIC",
            "-nostdlib",
            "-Wl,-soname,libc.so.6",
            "-o",
        ])
        .arg(libdir.join("libc.so.6"))
        .arg(&src)
        .status()
        .expect("run cc (install gcc)");
    assert!(ok.success(), "cc failed");
    std::fs::create_dir_all(host.root.join("etc")).unwrap();
    std::fs::write(
        host.root.join("etc/ld.so.conf"),
        "/usr/lib/x86_64-linux-gnu\n",
    )
    .unwrap();
    let ldconfig = Command::new("ldconfig")
        .arg("-r")
        .arg(&host.root)
        .output()
        .expect("run ldconfig");
    assert!(
        ldconfig.status.success(),
        "ldconfig -r failed: {}",
        String::from_utf8_lossy(&ldconfig.stderr)
    );
    assert!(host.root.join("etc/ld.so.cache").is_file());
    // The fake libraries read their sidecar next to where they are loaded from.
    host.configure(&format!(
        "[rule.driver]\nlibrary_dirs = []\n[[rule.mount]]\ninside = \"{LINK_LIB}/{SIDECAR_NAME}\"\n\
         outside = \"{}\"\nrequired = true\n",
        libdir.join(SIDECAR_NAME).display()
    ));

    let (text, explain) = host.explain();
    assert_eq!(explain["plan"]["driver"]["kind"], "host", "{text}");
    let exposures = explain["plan"]["exposures"].as_array().unwrap();
    let libcuda = exposures
        .iter()
        .find(|x| x["inside"] == "/run/opengl-driver/lib/libcuda.so.1")
        .unwrap_or_else(|| panic!("libcuda.so.1 not exposed:\n{text}"));
    assert_eq!(
        libcuda["outside"],
        libdir.join("libcuda.so.1").display().to_string().as_str()
    );
    assert!(
        libcuda["reason"]["source"]
            .as_str()
            .unwrap()
            .contains("/etc/ld.so.cache"),
        "{libcuda:#}"
    );
    for x in exposures {
        for side in ["inside", "outside"] {
            let path = x[side].as_str().unwrap();
            assert!(
                !path.contains("libc.so") && !path.contains("libstdc++"),
                "host libc exposed: {x:#}"
            );
        }
    }
    assert!(
        !explain["nix_answer"]
            .as_str()
            .unwrap()
            .contains("libc.so.6"),
        "{explain:#}"
    );

    let report = report(&host.check(LINK_LIB, "host"));
    assert_all_pass(&report);
    let library: LibraryFacts = report_facts(&report, "driver::library");
    assert_eq!(
        library.path,
        Path::new("/run/opengl-driver/lib/libcuda.so.1")
    );
    assert_eq!(report["manifest"]["content"]["driver"]["kind"], "host");
}

fn cc(args: &[&str]) {
    let out = Command::new("cc")
        .args(args)
        .output()
        .expect("run cc (install gcc)");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn lint_finds_static_cuda_archives_in_a_store_packages_closure() {
    if !nix_available("lint_finds_static_cuda_archives_in_a_store_packages_closure") {
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let t = temp.path();
    let compat = "/nix/store/00000000000000000000000000000000-fake-cuda-compat/compat";
    // A libcuda user with the compat directory first, linked against a stub libcuda.
    std::fs::create_dir_all(t.join("stubs")).unwrap();
    std::fs::write(
        t.join("stub.c"),
        "int cuInit(unsigned int f) { return 34; }\n",
    )
    .unwrap();
    std::fs::write(
        t.join("app.c"),
        "int cuInit(unsigned int);\nint app(void) { return cuInit(0); }\n",
    )
    .unwrap();
    let s = |p: &str| t.join(p).display().to_string();
    cc(&[
        "-shared",
        "-fPIC",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        &s("stubs/libcuda.so"),
        &s("stub.c"),
    ]);
    std::fs::create_dir_all(t.join("app/lib")).unwrap();
    let runpath = format!("-Wl,--enable-new-dtags,-rpath,{compat}:{LINK_LIB}");
    let stubs = format!("-L{}", s("stubs"));
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        &s("app/lib/libapp.so"),
        &s("app.c"),
        &runpath,
        &stubs,
        "-lcuda",
    ]);
    // The toolkit's static runtime, referenced by the package.
    std::fs::create_dir_all(t.join("toolkit/lib")).unwrap();
    cc(&["-c", "-o", &s("toolkit/lib/cudart.o"), &s("app.c")]);
    let ar = Command::new("ar")
        .args([
            "rcs",
            &s("toolkit/lib/libcudart_static.a"),
            &s("toolkit/lib/cudart.o"),
        ])
        .status()
        .unwrap();
    assert!(ar.success());
    std::fs::remove_file(t.join("toolkit/lib/cudart.o")).unwrap();

    let hook = workspace_binary("cuda-sandbox-hook");
    let config = t.join("config.toml");
    std::fs::write(
        &config,
        "[[rule]]\nname = \"nvidia\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia0\"\n",
    )
    .unwrap();
    let build = NixSandbox::with_hook(&hook, &config).build(
        &nix_file("lint-package.nix"),
        &[("package", &s("app")), ("toolkit", &s("toolkit"))],
        &[],
    );
    assert!(build.ok(), "building the package failed:\n{}", build.log);
    let package = build.out_paths[0].display().to_string();

    let lint = |closure: bool| {
        let mut cmd = Command::new(common::RUNNER);
        cmd.args(["lint", "--no-manifest", "--compat-dir", compat]);
        if closure {
            cmd.arg("--closure");
        }
        let out = cmd.arg(&package).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = lint(false);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("1 using libcuda, 0 CUDA runtime(s), 0 with GPU code; 0 finding(s)"),
        "{text}"
    );
    let (code, text) = lint(true);
    assert_eq!(code, Some(101), "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("libcudart_static.a: "))
        .unwrap_or_else(|| panic!("no static archive finding:\n{text}"));
    assert!(
        line.contains("-fake-cuda-toolkit-static/lib/libcudart_static.a"),
        "{line}"
    );
    assert!(
        line.contains(&format!("in the runtime closure of {package}")),
        "{line}"
    );
}

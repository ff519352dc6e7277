//! Wall time of the hook as Nix runs it: a fresh process per build, `HOOK <drv> <chroot>`.
//!
//! `cargo bench -p cuda-sandbox-hook --bench hook_process` prints the median (and p90, best)
//! of N runs for: an untagged derivation (the path every non-GPU build takes), a tagged one with
//! a warm closure cache, and a tagged one with a cold cache (a real `nix-store` query when Nix is
//! installed, else a stand-in script). Then the ratios the hook is held to, from paired runs (the
//! hook, then an empty `fn main(){}` binary built with the same rustc, alternately, so both see
//! the same machine load): untagged ≤ 1.2× and tagged with a warm cache ≤ 1.6× that floor.
//! Each run gets a fresh sandbox directory (the previous one removed, as Nix does), and the
//! config keeps all state in the benchmark's temporary directories: the runtime directory on
//! tmpfs (`/dev/shm`) where there is one, as `/run` is. Figures, not assertions.
//!
//! The same ratios are then printed for the default rule as a NixOS host runs it: the NixOS
//! module's rendering of it (`nix-tests/expected/default.toml`, which `nix-tests/module-eval.nix`
//! holds to the module's output) and the built-in rule (`hook/default-config.toml`), each with
//! only the state paths pointed into the benchmark's directories, on a fake host ([`NixosHost`]):
//! character devices made with `mknod` when the benchmark runs as root, the kernel module's
//! version file, `/run/opengl-driver` leading into a store through a `graphics-drivers` path of
//! links to an `nvidia-x11` path, a closure of [`DRIVER_CLOSURE`] paths, and the configuration
//! reached through the `/etc/static` links NixOS makes. `HOOK_BENCH_RUNS` sets the number of
//! runs (default 200); `HOOK_BENCH_KEEP=1` keeps the fake host and prints how to run the hook
//! on it (for `strace`, `valgrind` or `perf`); `HOOK_BENCH_BIN` times another build of the hook
//! (to compare two builds on the same fixtures).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BUILT_HOOK: &str = env!("CARGO_BIN_EXE_cuda-sandbox-hook");

/// The hook binary timed: this build's, or `HOOK_BENCH_BIN`, as installed ([`installed`]).
fn hook_bin() -> PathBuf {
    static HOOK: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOOK.get_or_init(|| {
        let built = std::env::var_os("HOOK_BENCH_BIN")
            .map_or_else(|| PathBuf::from(BUILT_HOOK), PathBuf::from);
        installed(&built)
    })
    .clone()
}

/// A copy of `binary`, as a binary is installed (Nix copies a build's outputs into the store),
/// in a directory kept for the run. Both the hook and the floor are timed as copies: a file
/// the linker has just written starts with 6–8 more page faults than a copy of it (`perf stat
/// -e page-faults` on both), which would count the build, not the program.
fn installed(binary: &Path) -> PathBuf {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("a directory for the copies"));
    let name = format!(
        "{}-{}",
        dir.path().read_dir().map_or(0, |d| d.count()),
        binary
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("binary")
    );
    let copy = dir.path().join(name);
    std::fs::copy(binary, &copy).expect("copy the binary");
    copy
}
const DEFAULT_RUNS: usize = 200;
/// Store paths in the fake driver's closure: a NixOS `graphics-drivers` path with the NVIDIA
/// driver has a few dozen (`nix-store -qR /run/opengl-driver`: the driver, Mesa, libglvnd,
/// libdrm, glibc and their libraries).
const DRIVER_CLOSURE: usize = 40;

fn runs() -> usize {
    std::env::var("HOOK_BENCH_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_RUNS)
}

fn typical_drv(features: Option<&str>) -> String {
    let mut env = vec![
        (
            "builder".to_string(),
            "/nix/store/8fv91097mbh5049i9rglc73dx6kjg3qk-bash-5.2-p15/bin/bash".to_string(),
        ),
        ("name".to_string(), "python3.11-torch-2.1.0".to_string()),
        (
            "out".to_string(),
            "/nix/store/0a6gyfmcmsq2xbqvcjvd2qxwlw7g8bd5-python3.11-torch-2.1.0".to_string(),
        ),
        ("system".to_string(), "x86_64-linux".to_string()),
        (
            "buildPhase".to_string(),
            "runHook preBuild\nmake -j$NIX_BUILD_CORES\nrunHook postBuild\n".repeat(8),
        ),
    ];
    for i in 0..40 {
        env.push((
            format!("var{i:02}"),
            format!("/nix/store/{i:032}-dep-{i}/lib /nix/store/{i:032}-dep-{i}-dev"),
        ));
    }
    if let Some(f) = features {
        env.push(("requiredSystemFeatures".to_string(), f.to_string()));
    }
    env.sort();
    let esc = |s: &str| {
        s.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    let env: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("(\"{}\",\"{}\")", esc(k), esc(v)))
        .collect();
    let inputs: Vec<String> = (0..30)
        .map(|i| format!("(\"/nix/store/{i:032}-dep-{i}.drv\",[\"out\"])"))
        .collect();
    format!(
        "Derive([(\"out\",\"/nix/store/0a6gyfmcmsq2xbqvcjvd2qxwlw7g8bd5-python3.11-torch-2.1.0\",\"\",\"\")],[{}],[\"/nix/store/aaaa-source\"],\"x86_64-linux\",\"/nix/store/8fv91097mbh5049i9rglc73dx6kjg3qk-bash-5.2-p15/bin/bash\",[\"-e\",\"/nix/store/bbbb-default-builder.sh\"],[{}])",
        inputs.join(","),
        env.join(",")
    )
}

fn time_runs(
    drv: &Path,
    config: &Path,
    sandboxes: &Sandboxes,
    before_each: impl Fn(),
) -> Vec<Duration> {
    let mut times = Vec::with_capacity(runs());
    for _ in 0..runs() {
        before_each();
        times.push(run_hook(drv, config, &sandboxes.next()));
    }
    times.sort();
    times
}

/// One hook run as Nix makes it (`HOOK <drv> <chroot>`), timed; it must succeed.
fn run_hook(drv: &Path, config: &Path, chroot: &Path) -> Duration {
    let start = Instant::now();
    let out = Command::new(hook_bin())
        .arg(drv)
        .arg(chroot)
        .env("CUDA_SANDBOX_CONFIG", config)
        .output()
        .expect("run the hook");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// A fresh sandbox directory per run, the previous one removed, as Nix does for each build:
/// every run writes a manifest of its own, and the manifests of ended builds pile up until the
/// hook sweeps them, so the sweep's cost is in the figures at the rate a real host pays it.
struct Sandboxes {
    dir: PathBuf,
    count: std::cell::Cell<usize>,
}

impl Sandboxes {
    fn next(&self) -> PathBuf {
        let n = self.count.get();
        let _ = std::fs::remove_dir(self.dir.join(format!("build-{n}.drv.chroot")));
        self.count.set(n + 1);
        let chroot = self.dir.join(format!("build-{}.drv.chroot", n + 1));
        std::fs::create_dir_all(&chroot).unwrap();
        chroot
    }
}

fn report(what: &str, times: &[Duration]) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{what:<44} median {:>7.3} ms   p90 {:>7.3} ms   best {:>7.3} ms   ({} runs)",
        ms(times[times.len() / 2]),
        ms(times[times.len() * 9 / 10]),
        ms(times[0]),
        times.len()
    );
}

/// A store path with a real closure when Nix is installed (and we may write the store).
fn real_store_path(dir: &Path) -> Option<PathBuf> {
    let file = dir.join("fake-driver-payload");
    std::fs::write(&file, "bench payload").ok()?;
    let out = Command::new("nix-store")
        .arg("--add")
        .arg(&file)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let root = d.join("root");
    std::fs::create_dir_all(root.join("dev")).unwrap();
    std::fs::create_dir_all(root.join("run")).unwrap();
    for dev in ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"] {
        // Directories count as devices too, so this runs without root.
        std::fs::create_dir_all(root.join("dev").join(dev)).unwrap();
    }
    let (target, nix_store, store_dir, kind) = match real_store_path(d) {
        Some(p) => (
            p,
            "nix-store".to_string(),
            "/nix/store".to_string(),
            "real nix-store",
        ),
        None => {
            let store = d.join("store");
            std::fs::create_dir_all(store.join("aaa-driver")).unwrap();
            let script = d.join("nix-store");
            std::fs::write(&script, "#!/bin/sh\necho \"$3\"\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
            (
                store.join("aaa-driver"),
                script.display().to_string(),
                store.display().to_string(),
                "stand-in nix-store",
            )
        }
    };
    std::os::unix::fs::symlink(&target, root.join("run/opengl-driver")).unwrap();
    let cache = d.join("cache");
    // The runtime directory (manifests) and the sandboxes on tmpfs where there is one, as
    // `/run` is on systemd hosts and NixOS: a file written on a disk filesystem costs journal
    // and writeback work that the hook's real runtime directory does not.
    let volatile = tempfile::Builder::new()
        .prefix("cuda-sandbox-bench")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let v = volatile.path();
    let sandboxes = Sandboxes {
        dir: v.join("sandboxes"),
        count: Default::default(),
    };
    let config = d.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "host_root = \"{}\"\nstore_dir = \"{store_dir}\"\nclosure_cache = \"{}\"\nruntime_dir = \"{}\"\nnix_store = \"{nix_store}\"\n\
             [[rule]]\nname = \"nvidia\"\nfeatures = [\"cuda\", \"gpu\", \"nvidia-gpu\", \"opengl\"]\n\
             [[rule.device]]\nglob = \"/dev/nvidiactl\"\nrequired = true\n\
             [[rule.device]]\nglob = \"/dev/nvidia-uvm\"\nrequired = true\n\
             [[rule.device]]\nglob = \"/dev/nvidia[0-9]*\"\nrequired = true\n\
             [[rule.device]]\nglob = \"/dev/nvidia-modeset\"\n\
             [[rule.device]]\nglob = \"/dev/dri/renderD*\"\n\
             [[rule.path]]\npath = \"/run/opengl-driver\"\nrequired = true\n",
            root.display(),
            cache.display(),
            v.join("run").display()
        ),
    )
    .unwrap();
    let untagged = d.join("untagged.drv");
    let untagged_features = d.join("untagged-features.drv");
    let tagged = d.join("tagged.drv");
    std::fs::write(&untagged, typical_drv(None)).unwrap();
    std::fs::write(&untagged_features, typical_drv(Some("big-parallel"))).unwrap();
    std::fs::write(&tagged, typical_drv(Some("cuda big-parallel"))).unwrap();

    println!(
        "hook process wall time ({} bytes .drv, {kind}, {} cores, runtime_dir in {})",
        typical_drv(None).len(),
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        v.display()
    );
    report(
        "untagged (no requiredSystemFeatures)",
        &time_runs(&untagged, &config, &sandboxes, || {}),
    );
    report(
        "untagged (features, none configured)",
        &time_runs(&untagged_features, &config, &sandboxes, || {}),
    );
    report(
        "tagged, warm closure cache",
        &time_runs(&tagged, &config, &sandboxes, || {}),
    );
    report(
        "tagged, cold closure cache",
        &time_runs(&tagged, &config, &sandboxes, || {
            let _ = std::fs::remove_dir_all(&cache);
        }),
    );
    let baseline = {
        let mut t: Vec<Duration> = (0..runs())
            .map(|_| {
                let s = Instant::now();
                Command::new("/bin/true").status().unwrap();
                s.elapsed()
            })
            .collect();
        t.sort();
        t
    };
    report("baseline: spawning /bin/true", &baseline);

    let nixos_dir = tempfile::Builder::new()
        .prefix("cuda-sandbox-bench-nixos")
        .tempdir()
        .unwrap();
    let nixos = NixosHost::create(nixos_dir.path(), v);
    // Fill the closure cache, as the first tagged build on a host does.
    for config in [&nixos.module_config, &nixos.builtin_config] {
        run_hook(&tagged, config, &sandboxes.next());
    }
    let Some(floor) = empty_main(d) else {
        println!("(no rustc found: the empty-main floor was not measured)");
        return;
    };
    println!(
        "paired with an empty `fn main(){{}}` (the process floor), median of {} pairs:",
        runs()
    );
    for (what, drv, target) in [
        ("untagged", &untagged, 1.2),
        (
            "untagged (features, none configured)",
            &untagged_features,
            1.2,
        ),
        ("tagged, warm closure cache", &tagged, 1.6),
    ] {
        print_paired(what, paired(drv, &config, &floor, &sandboxes), target);
    }
    println!(
        "the default rule on a NixOS-like host ({}, driver closure of {DRIVER_CLOSURE}, \
         config through /etc/static), paired the same way:",
        if nixos.char_devices {
            "character devices"
        } else {
            "directories for devices: not root"
        }
    );
    for (what, drv, config, target) in [
        (
            "untagged, module's config",
            &untagged,
            &nixos.module_config,
            1.2,
        ),
        (
            "tagged, module's rendering, warm",
            &tagged,
            &nixos.module_config,
            1.6,
        ),
        (
            "tagged, built-in rule, warm",
            &tagged,
            &nixos.builtin_config,
            1.6,
        ),
    ] {
        print_paired(what, paired(drv, config, &floor, &sandboxes), target);
    }
    if std::env::var_os("HOOK_BENCH_KEEP").is_some() {
        let keep = |t: tempfile::TempDir| t.keep().display().to_string();
        let chroot = sandboxes.next();
        println!(
            "kept: CUDA_SANDBOX_CONFIG={} {} {} {} (and {}, {}, {})",
            nixos.module_config.display(),
            hook_bin().display(),
            tagged.display(),
            chroot.display(),
            nixos.builtin_config.display(),
            keep(nixos_dir),
            keep(dir),
        );
        println!("floor: {}", floor.display());
        let _ = keep(volatile);
    }
}

/// An empty `fn main(){}` built like the hook (optimised, panic = abort), when rustc is here.
fn empty_main(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("empty.rs");
    std::fs::write(&src, "fn main() {}\n").ok()?;
    let out = dir.join("empty-main");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let ok = Command::new(rustc)
        .args(["-C", "opt-level=3", "-C", "panic=abort", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .ok()?
        .success();
    ok.then(|| installed(&out))
}

/// Median hook time and median floor time over [`runs`] alternating pairs.
fn paired(drv: &Path, config: &Path, floor: &Path, sandboxes: &Sandboxes) -> (Duration, Duration) {
    let mut hook = Vec::with_capacity(runs());
    let mut base = Vec::with_capacity(runs());
    for _ in 0..runs() {
        let chroot = sandboxes.next();
        hook.push(run_hook(drv, config, &chroot));
        let s = Instant::now();
        Command::new(floor)
            .arg(drv)
            .arg(&chroot)
            .output()
            .expect("run the floor");
        base.push(s.elapsed());
    }
    hook.sort();
    base.sort();
    (hook[hook.len() / 2], base[base.len() / 2])
}

/// Prints one paired case: the hook's median, the floor's, their ratio and the target.
fn print_paired(what: &str, (hook, base): (Duration, Duration), target: f64) {
    let ratio = hook.as_secs_f64() / base.as_secs_f64();
    println!(
        "  {what:<40} hook {:>7.3} ms  floor {:>7.3} ms  ratio {ratio:.2}x (target <= {target}x: {})",
        hook.as_secs_f64() * 1e3,
        base.as_secs_f64() * 1e3,
        if ratio <= target { "met" } else { "NOT met" }
    );
}

/// A host as NixOS sets it up for the default rule, under `dir`, with the hook's state in the
/// benchmark's directories (`volatile`: the runtime directory, on tmpfs where there is one).
struct NixosHost {
    /// The configuration with the module's rendering of the default rule, as `/etc` holds it:
    /// `etc/cuda-sandbox/config.toml` → `etc/static/…` → a store file.
    module_config: PathBuf,
    /// The built-in rule (`hook/default-config.toml`) with the same state paths.
    builtin_config: PathBuf,
    /// Whether the devices are real character devices (`mknod` needs root).
    char_devices: bool,
}

/// The NixOS module's rendering of the default rule with default options.
const MODULE_RENDERING: &str = include_str!("../../nix-tests/expected/default.toml");

impl NixosHost {
    fn create(dir: &Path, volatile: &Path) -> NixosHost {
        use std::os::unix::fs::symlink;
        let root = dir.join("root");
        let store = dir.join("store");
        let char_devices = cuda_sandbox_testkit::FakeDevices::create(&root, 2, true).is_ok();
        if !char_devices {
            for dev in [
                "nvidia0",
                "nvidia1",
                "nvidiactl",
                "nvidia-uvm",
                "nvidia-uvm-tools",
            ] {
                // Directories count as devices too, so this runs without root.
                std::fs::create_dir_all(root.join("dev").join(dev)).unwrap();
            }
        }
        std::fs::create_dir_all(root.join("proc/driver/nvidia")).unwrap();
        std::fs::write(
            root.join("proc/driver/nvidia/version"),
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n\
             GCC version:  gcc version 13.2.0 (GCC)\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("run")).unwrap();

        // The driver as NixOS installs it: `nvidia-x11` holds the libraries (versioned file,
        // soname link), `graphics-drivers` (a buildEnv) links to them, `/run/opengl-driver` to it.
        let version = "550.54.14";
        let x11 = store.join(format!("{}-nvidia-x11-{version}", "1".repeat(32)));
        let drivers = store.join(format!("{}-graphics-drivers", "2".repeat(32)));
        std::fs::create_dir_all(x11.join("lib")).unwrap();
        std::fs::create_dir_all(drivers.join("lib")).unwrap();
        let libs = [
            "libcuda",
            "libnvidia-ml",
            "libnvidia-ptxjitcompiler",
            "libnvidia-nvvm",
        ];
        for lib in libs {
            let file = format!("{lib}.so.{version}");
            let soname = format!("{lib}.so.1");
            if cuda_sandbox_testkit::shared_library(&x11.join("lib").join(&file), Some(&soname))
                .is_err()
            {
                std::fs::write(x11.join("lib").join(&file), b"\x7fELF").unwrap();
            }
            symlink(&file, x11.join("lib").join(&soname)).unwrap();
            symlink(&soname, x11.join("lib").join(format!("{lib}.so"))).unwrap();
            for name in [file, soname, format!("{lib}.so")] {
                symlink(x11.join("lib").join(&name), drivers.join("lib").join(&name)).unwrap();
            }
        }
        symlink(&drivers, root.join("run/opengl-driver")).unwrap();
        let mut closure = vec![drivers.clone(), x11];
        for i in closure.len()..DRIVER_CLOSURE {
            let member = store.join(format!("{i:032}-driver-dep-{i}"));
            std::fs::create_dir_all(member.join("lib")).unwrap();
            closure.push(member);
        }
        // `nix-store --query --requisites PATH`: the closure, the path itself first.
        let nix_store = dir.join("nix-store");
        let others: Vec<String> = closure[1..]
            .iter()
            .map(|p| format!("echo {}\n", p.display()))
            .collect();
        cuda_sandbox_testkit::write_script(
            &nix_store,
            &format!("#!/bin/sh\necho \"$3\"\n{}", others.concat()),
        )
        .unwrap();

        // Only the state paths differ from a real host's: the benchmark keeps them to itself.
        let state = format!(
            "host_root = \"{}\"\nstore_dir = \"{}\"\nnix_store = \"{}\"\n",
            root.display(),
            store.display(),
            nix_store.display()
        );
        let paths = format!(
            "closure_cache = \"{}\"\nruntime_dir = \"{}\"\n",
            dir.join("cache/closures").display(),
            volatile.join("nixos-run").display()
        );
        let module_text: String = MODULE_RENDERING
            .lines()
            .filter(|l| !l.starts_with("closure_cache = ") && !l.starts_with("runtime_dir = "))
            .map(|l| format!("{l}\n"))
            .collect();
        let module_text = format!("{state}{paths}{module_text}");
        // /etc/cuda-sandbox/config.toml → /etc/static/cuda-sandbox/config.toml, /etc/static →
        // the system's `etc` store path, whose entry links to the rendered file in the store.
        let rendered = store.join(format!("{}-cuda-sandbox.toml", "3".repeat(32)));
        std::fs::write(&rendered, module_text).unwrap();
        let etc_store = store.join(format!("{}-etc", "4".repeat(32)));
        std::fs::create_dir_all(etc_store.join("etc/cuda-sandbox")).unwrap();
        symlink(&rendered, etc_store.join("etc/cuda-sandbox/config.toml")).unwrap();
        let etc = dir.join("etc");
        std::fs::create_dir_all(etc.join("cuda-sandbox")).unwrap();
        symlink(etc_store.join("etc"), etc.join("static")).unwrap();
        let module_config = etc.join("cuda-sandbox/config.toml");
        symlink(etc.join("static/cuda-sandbox/config.toml"), &module_config).unwrap();

        let builtin_config = dir.join("builtin.toml");
        std::fs::write(
            &builtin_config,
            format!("{state}{paths}{}", cuda_sandbox_hook::config::BUILTIN_TOML),
        )
        .unwrap();
        NixosHost {
            module_config,
            builtin_config,
            char_devices,
        }
    }
}

//! Wall time of the hook as Nix runs it: a fresh process per build, `HOOK <drv> <chroot>`.
//!
//! `cargo bench -p cuda-sandbox-hook --bench hook_process` prints the median (and p90, best)
//! of N runs for: an untagged derivation (the path every non-GPU build takes), a tagged one with
//! a warm closure cache, and a tagged one with a cold cache (a real `nix-store` query when Nix is
//! installed, else a stand-in script). Then the ratios the hook is held to, from paired runs (the
//! hook, then an empty `fn main(){}` binary built with the same rustc, alternately, so both see
//! the same machine load): untagged ≤ 1.2× and tagged with a warm cache ≤ 1.5× that floor.
//! Each run gets a fresh sandbox directory (the previous one removed, as Nix does), and the
//! config keeps all state in the benchmark's temporary directories: the runtime directory on
//! tmpfs (`/dev/shm`) where there is one, as `/run` is. Figures, not assertions.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const HOOK: &str = env!("CARGO_BIN_EXE_cuda-sandbox-hook");
const RUNS: usize = 200;

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
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        before_each();
        times.push(run_hook(drv, config, &sandboxes.next()));
    }
    times.sort();
    times
}

/// One hook run as Nix makes it (`HOOK <drv> <chroot>`), timed; it must succeed.
fn run_hook(drv: &Path, config: &Path, chroot: &Path) -> Duration {
    let start = Instant::now();
    let out = Command::new(HOOK)
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
        let mut t: Vec<Duration> = (0..RUNS)
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

    match empty_main(d) {
        Some(floor) => {
            println!(
                "paired with an empty `fn main(){{}}` (the process floor), median of {RUNS} pairs:"
            );
            for (what, drv, target) in [
                ("untagged", &untagged, 1.2),
                (
                    "untagged (features, none configured)",
                    &untagged_features,
                    1.2,
                ),
                ("tagged, warm closure cache", &tagged, 1.5),
            ] {
                let (hook, base) = paired(drv, &config, &floor, &sandboxes);
                let ratio = hook.as_secs_f64() / base.as_secs_f64();
                println!(
                    "  {what:<40} hook {:>7.3} ms  floor {:>7.3} ms  ratio {ratio:.2}x (target <= {target}x: {})",
                    hook.as_secs_f64() * 1e3,
                    base.as_secs_f64() * 1e3,
                    if ratio <= target { "met" } else { "NOT met" }
                );
            }
        }
        None => println!("(no rustc found: the empty-main floor was not measured)"),
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
    ok.then_some(out)
}

/// Median hook time and median floor time over `RUNS` alternating pairs.
fn paired(drv: &Path, config: &Path, floor: &Path, sandboxes: &Sandboxes) -> (Duration, Duration) {
    let mut hook = Vec::with_capacity(RUNS);
    let mut base = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
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
    (hook[RUNS / 2], base[RUNS / 2])
}

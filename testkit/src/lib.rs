//! Test support shared by the workspace's integration tests.
//!
//! Real parts only: [`NixSandbox`] runs Debian's (or any) `nix-build` with the sandbox on and
//! the freshly built hook as `pre-build-hook`; [`FakeDevices`] makes real character devices with
//! `mknod`. Tests that need them call [`nix_available`] first: outside CI a machine without
//! root or Nix skips them with a printed reason; under `CI=true` that is a failure.

pub mod crafted_elf;
pub mod explain;
pub mod fake_mig;
pub mod fake_pci;
pub mod fatbin_fixtures;
pub mod gpu_library;
pub mod nix_version;
pub mod real_nvidia;
pub mod terminal;

pub use explain::exposed_inside;
pub use fake_mig::FakeMig;
pub use fake_pci::FakePci;
pub use nix_version::{DerivationJson, NixVersion};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

/// Whether tests needing root and `nix-build` can run. Under `CI=true` a missing prerequisite
/// panics (those tests must run in CI); elsewhere it prints why `test` is skipped.
pub fn nix_available(test: &str) -> bool {
    let missing = if !nix::unistd::geteuid().is_root() {
        Some("not running as root")
    } else if Command::new("nix-build").arg("--version").output().is_err() {
        Some("nix-build is not installed (apt-get install nix-bin)")
    } else {
        None
    };
    match missing {
        None => true,
        Some(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{test} needs root and Nix and must run in CI: {why}")
        }
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// A string unique to this process and call, for derivation attributes that force a rebuild
/// (Nix never rebuilds an output it already has).
pub fn nonce() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{}-{}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// The directory holding the workspace's built binaries and libraries for the running test's
/// profile (`target/debug` for `cargo test`): the test binary lives in its `deps/`.
pub fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    let deps = exe.parent().expect("test binary directory");
    deps.parent().unwrap_or(deps).to_path_buf()
}

/// A binary of the workspace, built in the same profile. Panics with the command to run when
/// it has not been built, so a missing build never looks like a pass.
pub fn workspace_binary(name: &str) -> PathBuf {
    let path = target_profile_dir().join(name);
    assert!(
        path.is_file(),
        "{} is not built: run `cargo build --workspace` before the tests",
        path.display()
    );
    path
}

/// A fake host tree with real NVIDIA-like character devices.
#[derive(Debug)]
pub struct FakeDevices {
    /// The host root: devices are at `<root>/dev/...`.
    pub root: PathBuf,
}

/// Major number of `/dev/nvidia*` nodes.
pub const NVIDIA_MAJOR: u64 = 195;
/// A major number standing in for the dynamically allocated `nvidia-uvm` one.
pub const FAKE_UVM_MAJOR: u64 = 235;

impl FakeDevices {
    /// Creates `<root>/dev/nvidia0..gpus`, `nvidiactl` (195:255) and, when `uvm`, `nvidia-uvm`
    /// (235:0) and `nvidia-uvm-tools` (235:1).
    pub fn create(root: &Path, gpus: u64, uvm: bool) -> std::io::Result<FakeDevices> {
        let dev = root.join("dev");
        std::fs::create_dir_all(&dev)?;
        for i in 0..gpus {
            mknod_char(&dev.join(format!("nvidia{i}")), NVIDIA_MAJOR, i)?;
        }
        mknod_char(&dev.join("nvidiactl"), NVIDIA_MAJOR, 255)?;
        if uvm {
            mknod_char(&dev.join("nvidia-uvm"), FAKE_UVM_MAJOR, 0)?;
            mknod_char(&dev.join("nvidia-uvm-tools"), FAKE_UVM_MAJOR, 1)?;
        }
        Ok(FakeDevices {
            root: root.to_path_buf(),
        })
    }
}

/// Makes a character device node (mode 0666).
pub fn mknod_char(path: &Path, major: u64, minor: u64) -> std::io::Result<()> {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    mknod(
        path,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(major, minor),
    )
    .map_err(std::io::Error::from)
}

/// Writes an executable script.
pub fn write_script(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

/// How to run `nix-build` for a test: real sandbox, no substituters, the hook installed.
#[derive(Debug, Clone)]
pub struct NixSandbox {
    /// The `pre-build-hook`, if any.
    pub hook: Option<PathBuf>,
    /// The hook's config file, passed as `CUDA_SANDBOX_CONFIG`.
    pub config: Option<PathBuf>,
    /// The `system-features` setting.
    pub system_features: String,
    /// Host paths every build sees (`sandbox-paths`): what a dynamically linked builder needs.
    pub sandbox_paths: Vec<String>,
    /// Extra `key = value` settings.
    pub extra_settings: Vec<String>,
}

/// What a `nix-build` run did.
#[derive(Debug)]
pub struct Build {
    /// The raw process output.
    pub output: Output,
    /// Its stderr (the build log and Nix's messages) as text.
    pub log: String,
    /// The output paths it printed.
    pub out_paths: Vec<PathBuf>,
}

impl Build {
    /// Whether nix-build succeeded.
    pub fn ok(&self) -> bool {
        self.output.status.success()
    }
}

impl NixSandbox {
    /// A sandbox with `hook` installed (reading `config`) and `system-features = cuda`.
    pub fn with_hook(hook: &Path, config: &Path) -> NixSandbox {
        NixSandbox {
            hook: Some(hook.to_path_buf()),
            config: Some(config.to_path_buf()),
            ..NixSandbox::without_hook()
        }
    }

    /// A sandbox with no hook, `system-features = cuda`, and the host's `/bin`, `/usr`,
    /// `/lib`, `/lib64` (those that exist) for dynamically linked builders.
    pub fn without_hook() -> NixSandbox {
        NixSandbox {
            hook: None,
            config: None,
            system_features: "cuda".to_string(),
            sandbox_paths: ["/bin", "/usr", "/lib", "/lib64"]
                .iter()
                .filter(|p| Path::new(p).exists())
                .map(|p| p.to_string())
                .collect(),
            extra_settings: Vec::new(),
        }
    }

    /// The `NIX_CONFIG` text for this sandbox. Under a Nix that copies symlinks into the
    /// sandbox ([`NixVersion::copies_sandbox_symlinks`]), `sandbox-paths` also lists the
    /// targets of the links among them (`/lib -> usr/lib`), so that the sandbox shows what Nix
    /// 2.8 shows; under 2.8 the paths are as given.
    pub fn nix_config(&self) -> String {
        let copies = NixVersion::current().is_some_and(NixVersion::copies_sandbox_symlinks);
        let sandbox_paths = if copies {
            nix_version::with_link_targets(&self.sandbox_paths)
        } else {
            self.sandbox_paths.clone()
        };
        let mut lines = vec![
            "sandbox = true".to_string(),
            "sandbox-fallback = false".to_string(),
            "substituters =".to_string(),
            format!("system-features = {}", self.system_features),
            format!("sandbox-paths = {}", sandbox_paths.join(" ")),
        ];
        if let Some(hook) = &self.hook {
            lines.push(format!("pre-build-hook = {}", hook.display()));
        }
        lines.extend(self.extra_settings.iter().cloned());
        lines.join("\n")
    }

    /// Runs `nix-build FILE --no-out-link` with `--argstr` pairs and extra arguments.
    pub fn build(&self, file: &Path, argstrs: &[(&str, &str)], extra: &[&str]) -> Build {
        let mut cmd = Command::new("nix-build");
        cmd.arg(file).arg("--no-out-link");
        for (k, v) in argstrs {
            cmd.args(["--argstr", k, v]);
        }
        cmd.args(extra);
        cmd.env("NIX_CONFIG", self.nix_config());
        match &self.config {
            Some(c) => cmd.env("CUDA_SANDBOX_CONFIG", c),
            None => cmd.env_remove("CUDA_SANDBOX_CONFIG"),
        };
        let output = cmd.output().expect("run nix-build");
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        let out_paths = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| l.starts_with('/'))
            .map(PathBuf::from)
            .collect();
        Build {
            output,
            log,
            out_paths,
        }
    }
}

/// Builds a real shared library at `path` with the C compiler, with `soname` as its DT_SONAME
/// when given. Its one function is `int cuInit(unsigned)`, enough for loaders and ELF readers.
pub fn shared_library(path: &Path, soname: Option<&str>) -> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    let src = dir.path().join("lib.c");
    std::fs::write(&src, "int cuInit(unsigned int f) { return (int)f; }\n")?;
    let mut cc = Command::new("cc");
    cc.args(["-shared", "-fPIC", "-o"]).arg(path).arg(&src);
    if let Some(s) = soname {
        cc.arg(format!("-Wl,-soname,{s}"));
    }
    let out = cc.output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "cc failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

/// Adds a `.note.cuda.fwd_compatibility` note (owner `NVIDIA Corporation`, descriptor `json`)
/// to the ELF file at `path` with objcopy, as NVIDIA's compat `libcuda.so` files carry.
pub fn add_compat_note(path: &Path, json: &str) -> std::io::Result<()> {
    let mut note = Vec::new();
    let owner = b"NVIDIA Corporation\0";
    let pad = |v: &mut Vec<u8>| {
        while v.len() % 4 != 0 {
            v.push(0);
        }
    };
    note.extend_from_slice(&(owner.len() as u32).to_le_bytes());
    note.extend_from_slice(&(json.len() as u32 + 1).to_le_bytes());
    note.extend_from_slice(&1u32.to_le_bytes());
    note.extend_from_slice(owner);
    pad(&mut note);
    note.extend_from_slice(json.as_bytes());
    note.push(0);
    pad(&mut note);
    let dir = tempfile::tempdir()?;
    let note_file = dir.path().join("note.bin");
    std::fs::write(&note_file, note)?;
    // A section whose name starts with .note is added as SHT_NOTE.
    let out = Command::new("objcopy")
        .arg("--add-section")
        .arg(format!(
            ".note.cuda.fwd_compatibility={}",
            note_file.display()
        ))
        .arg(path)
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "objcopy failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

/// Whether tests needing root can run; like [`nix_available`] for root alone.
pub fn root_available(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test} needs root and must run in CI");
    }
    eprintln!("SKIPPED {test}: not running as root");
    false
}

/// The hook configuration the sandbox tests share: `root` as the host root, closure cache and
/// manifests under `state`, and one rule `nvidia` answering to `features` that requires the
/// NVIDIA nodes every CUDA process needs (`nvidiactl`, `nvidia-uvm`, `nvidia[0-9]*`). `top`
/// adds top-level keys (each line ending in a newline); `rule` adds entries to the rule.
pub fn hook_config(root: &Path, state: &Path, top: &str, features: &[&str], rule: &str) -> String {
    let features: Vec<String> = features.iter().map(|f| format!("{f:?}")).collect();
    format!(
        "{top}host_root = \"{root}\"\nclosure_cache = \"{cache}\"\nruntime_dir = \"{run}\"\n\
         [[rule]]\nname = \"nvidia\"\nfeatures = [{features}]\n\
         [[rule.device]]\nglob = \"/dev/nvidiactl\"\nrequired = true\n\
         [[rule.device]]\nglob = \"/dev/nvidia-uvm\"\nrequired = true\n\
         [[rule.device]]\nglob = \"/dev/nvidia[0-9]*\"\nrequired = true\n{rule}",
        root = root.display(),
        cache = state.join("cache").display(),
        run = state.join("run").display(),
        features = features.join(", "),
    )
}

/// A `[[rule.mount]]` entry (for [`hook_config`]'s `rule`) that binds `driver_dir` at
/// `/run/opengl-driver/lib` inside the build, as the NixOS driver link would be, required.
pub fn driver_mount(driver_dir: &Path) -> String {
    format!(
        "[[rule.mount]]\ninside = \"/run/opengl-driver/lib\"\noutside = \"{}\"\nrequired = true\n",
        driver_dir.display()
    )
}

/// What a dynamically linked builder needs from the host (`/lib`, `/lib64` where they exist),
/// and nothing else: the `sandbox-paths` of a sandbox that shows only what the hook adds.
pub fn builder_sandbox_paths() -> Vec<String> {
    ["/lib", "/lib64"]
        .iter()
        .filter(|p| Path::new(p).exists())
        .map(|p| p.to_string())
        .collect()
}

/// A fake host for the sandbox tests: a temporary directory holding `root/` (a [`FakeDevices`]
/// tree) and `config.toml`, a [`hook_config`] for that root with its state beside it.
#[derive(Debug)]
pub struct FakeHost {
    /// The temporary directory (removed when dropped).
    pub dir: tempfile::TempDir,
    /// The host root the hook looks at (`host_root`).
    pub root: PathBuf,
    /// The hook configuration.
    pub config: PathBuf,
}

impl FakeHost {
    /// `gpus` GPU nodes (and the uvm nodes when `uvm`) under a fresh root, and a config with
    /// [`hook_config`]'s `top`, `features` and `rule`.
    pub fn new(gpus: u64, uvm: bool, top: &str, features: &[&str], rule: &str) -> FakeHost {
        let dir = tempfile::tempdir().expect("temporary directory");
        let root = dir.path().join("root");
        FakeDevices::create(&root, gpus, uvm).expect("mknod the fake devices (needs root)");
        let config = dir.path().join("config.toml");
        std::fs::write(&config, hook_config(&root, dir.path(), top, features, rule))
            .expect("write the hook config");
        FakeHost { dir, root, config }
    }
}

/// Runs `cmd` and returns its output; a command that cannot start or fails panics with its
/// status and output.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("run {:?}: {e}", cmd.get_program()));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// Runs the C compiler `cc` with `args`, which must succeed (see [`run_ok`]); install gcc.
pub fn cc(args: &[&str]) -> Output {
    run_ok(Command::new("cc").args(args))
}

/// The write end of a pipe whose read end is closed already: a write to it fails with EPIPE
/// (for tests that a closed stdout or stderr ends a program quietly).
pub fn closed_pipe() -> std::process::Stdio {
    let mut reader = std::process::Command::new("true")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let write_end = reader.stdin.take().unwrap();
    reader.wait().unwrap();
    write_end.into()
}

/// Byte strings (a derivation's features) as text, bytes that are not UTF-8 shown as U+FFFD.
pub fn lossy<T: AsRef<[u8]>>(items: &[T]) -> Vec<String> {
    items
        .iter()
        .map(|i| String::from_utf8_lossy(i.as_ref()).into_owned())
        .collect()
}

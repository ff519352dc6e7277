//! Real Nix remote builds through `ssh-ng://`, the way a GPU builder is used.
//!
//! Each test starts a throwaway `sshd` on 127.0.0.1 (`common::ssh`: its own host key, config
//! and authorised client key in a temp dir; killed at the end). The builder URI is
//! `ssh-ng://root@127.0.0.1?remote-program=<wrapper>`: the wrapper gives the remote
//! `nix-daemon --stdio` its own nix.conf (`NIX_CONF_DIR`: sandbox on, `system-features = cuda`,
//! the freshly built hook as `pre-build-hook`), the hook's config (`CUDA_SANDBOX_CONFIG`: a fake
//! device tree of real character devices and a `missing_drv` policy) and sends the daemon's
//! stderr to a file: the builder's log, where the hook's messages go (Nix 2.8's client drops
//! non-JSON stderr lines of a remote build, so they never reach the client's log).
//!
//! The two sides have separate stores, as two machines would: the client is a chroot store
//! (`store = local?root=<tmp>`), the builder the machine's `/nix/store`. `ssh-ng` sends only a
//! `BasicDerivation`, so the hook on the builder is called with a `.drv` path that does not exist
//! there, and `missing_drv` decides. A control test swaps the stores (client: `/nix/store`,
//! builder: a chroot store via `remote-store=local?root=<tmp>`): the hook looks the `.drv` up
//! at its path `/nix/store/…drv`, finds the client's copy there, and follows the derivation's
//! tags. (One store for both sides deadlocks: the client holds the output's lock while the
//! builder waits for it.) NixOS/hydra#1565's case copies the `.drv` to the builder's store
//! through its daemon before the build (`nix copy --derivation`), as that patch to Hydra's
//! queue runner does.
//!
//! Needs root, `nix-build`, `ssh`, `ssh-keygen` and `sshd` (Debian: openssh-client,
//! openssh-server). Outside CI a missing one skips with a printed reason; under `CI=true` it is
//! a failure.

use cuda_sandbox_testkit::{nonce, write_script, FakeDevices, FakePci, NixVersion};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;

use common::ssh::{self, find_program, private_tmp, remote_available, write_file};
use common::HOOK;
use cuda_sandbox_testkit::run_ok;

/// A build that takes longer has hung (e.g. on a store lock): fail instead of waiting.
const BUILD_TIMEOUT: Duration = Duration::from_secs(60);

fn probe_nix() -> PathBuf {
    common::nix_file("probe.nix")
}

/// The Nix these tests run under (client and builder are the same).
fn nix_version() -> NixVersion {
    NixVersion::current().expect("nix-build --version")
}

/// A GPU builder reached over ssh-ng: sshd, the remote daemon's wrapper and configuration.
struct Builder {
    dir: tempfile::TempDir,
    sshd: Child,
    port: u16,
    /// The client's store, a chroot store; `None`: the client uses `/nix/store`.
    client_store: Option<PathBuf>,
    /// The builder's store, a chroot store; `None`: the builder uses `/nix/store`.
    builder_store: Option<PathBuf>,
    /// The Nix version the client runs under (`scripts/with-nix VERSION`); `None`: the Nix
    /// these tests run under, as the builder.
    client_nix: Option<&'static str>,
    /// The features the builder advertises (its nix.conf and the client's machine line).
    features: &'static str,
}

/// The builder's GPUs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gpus {
    /// Two GPUs, every build getting both.
    Alike,
    /// An 8.9 (`nvidia0`) and a 9.0 (`nvidia1`), their `/proc` and `/sys` entries and an
    /// inventory, one leased per build; the builder advertises `cuda-sm-90a` too.
    Mixed,
}

/// Which store each side uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stores {
    /// Client: a chroot store; builder: `/nix/store`. The `.drv` is not on the builder.
    Separate,
    /// Client: `/nix/store`; builder: a chroot store, whose hook still finds the `.drv` at its
    /// path `/nix/store/…drv` on this machine (the client wrote it there). The two cannot
    /// share one store: the client holds the output's lock while the builder waits for it.
    DrvVisible,
}

impl Drop for Builder {
    fn drop(&mut self) {
        let _ = self.sshd.kill();
        let _ = self.sshd.wait();
    }
}

/// What runs as the builder's `pre-build-hook`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HookAs {
    /// The hook itself.
    Itself,
    /// A wrapper that logs what the hook's standard input is (a `hook-stdin:` line of the
    /// builder's log) and execs the hook.
    ShowingStdin,
}

impl Builder {
    /// Starts a builder whose hook follows `missing_drv = policy`.
    fn start(policy: &str, stores: Stores) -> Builder {
        Builder::start_with(policy, stores, HookAs::Itself)
    }

    /// As [`Builder::start`], with `hook` as the builder's `pre-build-hook`.
    fn start_with(policy: &str, stores: Stores, hook: HookAs) -> Builder {
        Builder::start_on(policy, stores, hook, Gpus::Alike)
    }

    /// As [`Builder::start_with`], on a builder with `gpus`.
    fn start_on(policy: &str, stores: Stores, hook: HookAs, gpus: Gpus) -> Builder {
        let dir = tempfile::tempdir_in(private_tmp()).unwrap();
        let d = dir.path();

        // The fake GPU host and the hook's config.
        let root = d.join("root");
        FakeDevices::create(&root, 2, true).unwrap();
        let (features, leases) = match gpus {
            Gpus::Alike => ("cuda gpu", ""),
            Gpus::Mixed => {
                FakePci::create(&root, 2).unwrap();
                common::write_inventory(&d.join("run"), &["8.9", "9.0"]);
                ("cuda gpu cuda-sm-90a", "gpus_per_build = 1\n")
            }
        };
        let libcuda = d.join("libcuda.so.1");
        write_file(&libcuda, "FAKE libcuda on the remote builder\n");
        let hook_config = d.join("hook.toml");
        write_file(
            &hook_config,
            &cuda_sandbox_testkit::hook_config(
                &root,
                d,
                &format!("missing_drv = \"{policy}\"\n{leases}"),
                &["cuda", "gpu"],
                &format!(
                    "[[rule.device]]\nglob = \"/dev/nvidia-uvm-tools\"\n\
                     [[rule.mount]]\ninside = \"/run/opengl-driver/lib/libcuda.so.1\"\n\
                     outside = \"{}\"\nrequired = true\n",
                    libcuda.display()
                ),
            ),
        );

        let hook = match hook {
            HookAs::Itself => PathBuf::from(HOOK),
            HookAs::ShowingStdin => {
                let wrapper = d.join("hook-showing-stdin");
                write_script(
                    &wrapper,
                    &format!(
                        "#!/bin/sh\n\
                         # The hook's stdin, and the stdin of the daemon that runs it ($PPID).\n\
                         echo \"hook-stdin: $(readlink /proc/self/fd/0) daemon-stdin: \
                         $(readlink /proc/$PPID/fd/0)\" >&2\n\
                         exec {HOOK} \"$@\"\n"
                    ),
                )
                .unwrap();
                wrapper
            }
        };

        // The builder's own nix.conf, and the wrapper ssh runs instead of `nix-daemon`.
        let conf_dir = d.join("remote-etc-nix");
        std::fs::create_dir(&conf_dir).unwrap();
        let sandbox_paths: Vec<&str> = ["/bin", "/usr", "/lib", "/lib64"]
            .into_iter()
            .filter(|p| Path::new(p).exists())
            .collect();
        write_file(
            &conf_dir.join("nix.conf"),
            &format!(
                "sandbox = true\nsandbox-fallback = false\nsubstituters =\n\
                 system-features = {features}\nsandbox-paths = {}\npre-build-hook = {}\n",
                sandbox_paths.join(" "),
                hook.display()
            ),
        );
        let daemon = find_program("nix-daemon").unwrap();
        write_script(
            &d.join("remote-daemon"),
            &format!(
                "#!/bin/sh\n\
                 # The GPU builder's nix-daemon: its own nix.conf and hook config; its stderr\n\
                 # (the hook's messages) is the builder's log.\n\
                 unset NIX_CONFIG NIX_REMOTE\n\
                 export NIX_CONF_DIR={conf}\n\
                 export NIX_USER_CONF_FILES={conf}/nix.conf\n\
                 export CUDA_SANDBOX_CONFIG={hook_config}\n\
                 echo \"remote-daemon $*\" >> {d}/builder.log\n\
                 exec {daemon} \"$@\" 2>> {d}/builder.log\n",
                conf = conf_dir.display(),
                hook_config = hook_config.display(),
                d = d.display(),
                daemon = daemon.display(),
            ),
        )
        .unwrap();

        let (sshd, port) = ssh::start_sshd(d);
        let (client_store, builder_store) = match stores {
            Stores::Separate => (Some(d.join("client-store")), None),
            Stores::DrvVisible => (None, Some(d.join("builder-store"))),
        };
        Builder {
            dir,
            sshd,
            port,
            client_store,
            builder_store,
            client_nix: None,
            features,
        }
    }

    /// Whether the `.drv` of `remote`'s build is on disk at its path on this machine, where the
    /// builder's hook looks for it; checks that the client's store has it.
    fn drv_where_the_hook_looks(&self, remote: &Remote) -> bool {
        let drv = remote.drv();
        let in_client = match &self.client_store {
            Some(store) => store.join(drv.strip_prefix("/").unwrap()),
            None => drv.clone(),
        };
        assert!(
            in_client.is_file(),
            "{} is not in the client's store",
            drv.display()
        );
        drv.is_file()
    }

    /// The builder's log: the remote daemon's stderr, hook messages included.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("builder.log")).unwrap_or_default()
    }

    /// The builder URI.
    fn uri(&self) -> String {
        let mut uri = format!(
            "ssh-ng://root@127.0.0.1?remote-program={}",
            self.dir.path().join("remote-daemon").display()
        );
        if let Some(store) = &self.builder_store {
            uri.push_str(&format!("&remote-store=local?root={}", store.display()));
        }
        uri
    }

    /// The `builders` line: URI, systems, SSH key, max jobs, speed factor, supported and
    /// mandatory features.
    fn machine(&self, mandatory: &str) -> String {
        format!(
            "{} {}-linux {} 1 1 {} {mandatory}",
            self.uri(),
            std::env::consts::ARCH,
            self.dir.path().join("client_key").display(),
            self.features.replace(' ', ",")
        )
    }

    /// The client's `NIX_CONFIG`: it cannot build locally (max-jobs 0, no system features) and
    /// sends builds to this builder.
    fn client_nix_config(&self, mandatory: &str) -> String {
        let mut nix_config = vec![
            "substituters =".to_string(),
            "builders-use-substitutes = false".to_string(),
            "system-features =".to_string(),
            "max-jobs = 0".to_string(),
            format!("builders = {}", self.machine(mandatory)),
        ];
        if let Some(store) = &self.client_store {
            nix_config.push(format!("store = local?root={}", store.display()));
        }
        nix_config.join("\n")
    }

    /// `NIX_SSHOPTS` for this builder's sshd.
    fn ssh_opts(&self) -> String {
        ssh::ssh_opts(self.port)
    }

    /// The `.drv` of `attr` of probe.nix with `nonce`, written to the client's store.
    fn instantiate(&self, attr: &str, nonce: &str) -> PathBuf {
        let out = run_ok(
            Command::new("nix-instantiate")
                .arg(probe_nix())
                .args(["-A", attr, "--argstr", "nonce", nonce])
                .env("NIX_CONFIG", self.client_nix_config("-"))
                .env_remove("NIX_REMOTE"),
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    }

    /// Copies `drv` (with its closure) from the client's store to the builder's through the
    /// builder's daemon, as NixOS/hydra#1565's queue runner adds it to the paths it copies
    /// before a remote build.
    fn copy_to_builder(&self, drv: &Path) {
        run_ok(
            Command::new("nix")
                .args(["--extra-experimental-features", "nix-command", "copy"])
                .args(["--derivation", "--no-check-sigs", "--to"])
                .arg(format!(
                    "{}&ssh-key={}",
                    self.uri(),
                    self.dir.path().join("client_key").display()
                ))
                .arg(drv)
                .env("NIX_CONFIG", self.client_nix_config("-"))
                .env("NIX_SSHOPTS", self.ssh_opts())
                .env_remove("NIX_REMOTE"),
        );
    }

    /// Builds `attr` of probe.nix (fresh nonce) through this builder. Returns success, the
    /// client's log, the builder's log from this build, and the probe's report when it was
    /// built.
    fn build(&self, attr: &str, mandatory: &str) -> Remote {
        self.build_with_nonce(attr, mandatory, &nonce())
    }

    /// As [`Builder::build`], with `nonce` (so that the `.drv` is one already instantiated).
    fn build_with_nonce(&self, attr: &str, mandatory: &str, nonce: &str) -> Remote {
        let before = self.log().len();
        let start = Instant::now();
        let (stdout, stderr) = (
            self.dir.path().join("stdout"),
            self.dir.path().join("stderr"),
        );
        let mut client = match self.client_nix {
            Some(version) => {
                let mut c =
                    Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/with-nix"));
                c.args([version, "nix-build"])
                    .env("CUDA_SANDBOX_WITH_NIX_BIND", self.dir.path());
                c
            }
            None => Command::new("nix-build"),
        };
        let mut child = client
            .arg(probe_nix())
            .args(["-A", attr, "--no-out-link", "--argstr", "nonce", nonce])
            .env("NIX_CONFIG", self.client_nix_config(mandatory))
            .env("NIX_SSHOPTS", self.ssh_opts())
            .env_remove("CUDA_SANDBOX_CONFIG")
            .env_remove("NIX_REMOTE")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("run nix-build");
        let Some(status) = ssh::wait_at_most(&mut child, start, BUILD_TIMEOUT) else {
            panic!(
                "nix-build -A {attr} via ssh-ng took over {BUILD_TIMEOUT:?}; client log:\n{}\n\
                     builder log:\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default(),
                self.log()
            );
        };
        eprintln!("nix-build -A {attr} via ssh-ng: {:?}", start.elapsed());
        let client_log = std::fs::read_to_string(&stderr).unwrap_or_default();
        let builder_log = self.log()[before..].to_string();
        let report = std::fs::read_to_string(&stdout)
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with('/'))
            .map(|out| {
                // The output as the client has it: under the chroot store's root if any.
                let real = match &self.client_store {
                    Some(s) => s.join(out.trim_start_matches('/')),
                    None => PathBuf::from(out),
                };
                std::fs::read_to_string(&real)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e}", real.display()))
            });
        Remote {
            ok: status.success(),
            client_log,
            builder_log,
            report,
        }
    }
}

/// What a build through the builder did.
#[derive(Debug)]
struct Remote {
    ok: bool,
    client_log: String,
    builder_log: String,
    report: Option<String>,
}

impl Remote {
    /// The report of a build that must have succeeded, after checking it ran on the builder.
    fn report(&self) -> &str {
        assert!(self.ok, "the build failed:\n{self:#?}");
        assert!(
            self.client_log.contains("on 'ssh-ng://root@127.0.0.1"),
            "the build did not go to the builder:\n{self:#?}"
        );
        assert!(
            self.builder_log.contains("remote-daemon --stdio"),
            "the builder's daemon did not run:\n{self:#?}"
        );
        self.report.as_deref().expect("an output")
    }

    /// The `.drv` the client sent to the builder (its path, as both sides name it).
    fn drv(&self) -> PathBuf {
        let line = self
            .client_log
            .lines()
            .find(|l| l.starts_with("building '") && l.contains("' on 'ssh-ng://"))
            .unwrap_or_else(|| panic!("no remote build in the client's log:\n{self:#?}"));
        PathBuf::from(line.split('\'').nth(1).unwrap())
    }

    /// The hook's log lines on the builder.
    fn hook_lines(&self) -> Vec<&str> {
        self.builder_log
            .lines()
            .filter(|l| l.starts_with("cuda-sandbox-hook:"))
            .collect()
    }
}

fn assert_sees_gpu(report: &str, drv_name: &str) {
    for line in [
        "char /dev/nvidia0 195:0",
        "char /dev/nvidia1 195:1",
        "char /dev/nvidiactl 195:255",
        "char /dev/nvidia-uvm 235:0",
        "char /dev/nvidia-uvm-tools 235:1",
        "driver present",
        "driver-file ./lib/libcuda.so.1 FAKE libcuda on the remote builder",
    ] {
        assert!(
            report.contains(line),
            "{drv_name} lacks {line:?}:\n{report}"
        );
    }
    let manifest = report.lines().find(|l| l.starts_with("manifest ")).unwrap();
    assert!(
        manifest.contains(&format!("-{drv_name}.drv\"")),
        "{manifest}"
    );
}

fn assert_sees_nothing(report: &str, drv_name: &str) {
    for dev in [
        "nvidia0",
        "nvidia1",
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
    ] {
        assert!(
            report.contains(&format!("absent /dev/{dev}\n")),
            "{drv_name} sees /dev/{dev}:\n{report}"
        );
    }
    assert!(
        report.contains("driver absent"),
        "{drv_name} sees the driver:\n{report}"
    );
    assert!(
        report.contains("manifest absent"),
        "{drv_name} sees a manifest:\n{report}"
    );
}

/// The hook's line saying the `.drv` is not on the builder, for `probe-tagged`.
fn assert_drv_missing_on_builder<'a>(remote: &'a Remote, policy_text: &str) -> &'a str {
    let line = remote
        .hook_lines()
        .into_iter()
        .find(|l| l.contains("-probe-tagged.drv") && l.contains(policy_text))
        .unwrap_or_else(|| {
            panic!("no hook line with {policy_text:?} on the builder:\n{remote:#?}")
        });
    assert!(
        line.contains("No such file"),
        "the hook read the .drv on the builder: {line}"
    );
    line
}

/// Which of the mixed builder's GPUs a report shows: `nvidia0` (8.9) or `nvidia1` (9.0).
fn leased_gpu(report: &str) -> &'static str {
    match (
        report.contains("char /dev/nvidia0 195:0"),
        report.contains("char /dev/nvidia1 195:1"),
    ) {
        (true, false) => "nvidia0",
        (false, true) => "nvidia1",
        _ => panic!("not one GPU leased:\n{report}"),
    }
}

// The tests, one module per tier (docs/testing.md).
mod nix_versions;
mod sandbox;

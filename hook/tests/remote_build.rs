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

use cuda_sandbox_testkit::{nonce, write_script, FakeDevices, NixVersion};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::ssh::{self, find_program, private_tmp, remote_available, run, write_file};
use common::HOOK;

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
    /// A wrapper that hands the hook the derivation on a descriptor named by `DRV_ATERM_FD`,
    /// as a Nix that names one would (NixOS/nix#16413 is not settled). Nix 2.8 cannot, so the
    /// wrapper opens the client's copy of the `.drv` (the client's chroot store is on this
    /// machine) as descriptor 3 and execs the hook.
    WithAtermFd,
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
        let dir = tempfile::tempdir_in(private_tmp()).unwrap();
        let d = dir.path();

        // The fake GPU host and the hook's config.
        let root = d.join("root");
        FakeDevices::create(&root, 2, true).unwrap();
        let libcuda = d.join("libcuda.so.1");
        write_file(&libcuda, "FAKE libcuda on the remote builder\n");
        let hook_config = d.join("hook.toml");
        write_file(
            &hook_config,
            &cuda_sandbox_testkit::hook_config(
                &root,
                d,
                &format!("missing_drv = \"{policy}\"\n"),
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
            HookAs::WithAtermFd => {
                assert!(
                    stores == Stores::Separate,
                    "the wrapper reads the client's chroot store"
                );
                let wrapper = d.join("hook-with-aterm-fd");
                write_script(
                    &wrapper,
                    &format!(
                        "#!/bin/sh\n\
                         # A Nix that names a descriptor: the ATerm on it.\n\
                         exec 3< \"{store}$1\" || exit 1\n\
                         DRV_ATERM_FD=3 exec {HOOK} \"$@\"\n",
                        store = d.join("client-store").display()
                    ),
                )
                .unwrap();
                wrapper
            }
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
                 system-features = cuda gpu\nsandbox-paths = {}\npre-build-hook = {}\n",
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
            "{} {}-linux {} 1 1 cuda,gpu {mandatory}",
            self.uri(),
            std::env::consts::ARCH,
            self.dir.path().join("client_key").display()
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
        let out = run(Command::new("nix-instantiate")
            .arg(probe_nix())
            .args(["-A", attr, "--argstr", "nonce", nonce])
            .env("NIX_CONFIG", self.client_nix_config("-"))
            .env_remove("NIX_REMOTE"));
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    }

    /// Copies `drv` (with its closure) from the client's store to the builder's through the
    /// builder's daemon, as NixOS/hydra#1565's queue runner adds it to the paths it copies
    /// before a remote build.
    fn copy_to_builder(&self, drv: &Path) {
        run(Command::new("nix")
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
            .env_remove("NIX_REMOTE"));
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
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > BUILD_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "nix-build -A {attr} via ssh-ng took over {BUILD_TIMEOUT:?}; client log:\n{}\n\
                     builder log:\n{}",
                    std::fs::read_to_string(&stderr).unwrap_or_default(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
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

#[test]
fn remote_build_missing_drv_expose_gives_the_tagged_build_the_gpu() {
    if !remote_available("remote_build_missing_drv_expose_gives_the_tagged_build_the_gpu") {
        return;
    }
    let builder = Builder::start("expose", Stores::Separate);
    let remote = builder.build("tagged", "cuda");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert_sees_gpu(remote.report(), "probe-tagged");
    let line = remote
        .hook_lines()
        .into_iter()
        .find(|l| l.contains("-probe-tagged.drv is not on disk"))
        .unwrap_or_else(|| panic!("no missing_drv line on the builder:\n{remote:#?}"));
    assert!(line.contains("missing_drv = \"expose\""), "{line}");

    // Why `expose` belongs on a builder whose mandatory features include cuda: the hook cannot
    // tell an untagged build from a tagged one there, so one that reaches it gets the GPU too.
    let remote = builder.build("untagged", "-");
    assert_sees_gpu(remote.report(), "probe-untagged");
}

#[test]
fn remote_build_missing_drv_skip_builds_without_gpu_and_warns_on_the_builder() {
    if !remote_available(
        "remote_build_missing_drv_skip_builds_without_gpu_and_warns_on_the_builder",
    ) {
        return;
    }
    let builder = Builder::start("skip", Stores::Separate);
    let remote = builder.build("tagged", "cuda");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert_sees_nothing(remote.report(), "probe-tagged");
    let line = assert_drv_missing_on_builder(&remote, "missing_drv = \"skip\"");
    assert!(line.starts_with("cuda-sandbox-hook: warning:"), "{line}");
    assert!(line.contains("set missing_drv = \"expose\""), "{line}");
}

#[test]
fn remote_build_missing_drv_fail_fails_with_the_hooks_reason() {
    if !remote_available("remote_build_missing_drv_fail_fails_with_the_hooks_reason") {
        return;
    }
    let builder = Builder::start("fail", Stores::Separate);
    let remote = builder.build("tagged", "cuda");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert!(!remote.ok, "the build succeeded:\n{remote:#?}");
    assert!(remote.report.is_none());
    // The client learns that the hook failed on the builder ...
    assert!(
        remote.client_log.contains("on 'ssh-ng://root@127.0.0.1")
            && remote
                .client_log
                .contains(&nix_version().program_failed(HOOK, 1)),
        "{remote:#?}"
    );
    // ... and the builder's log has the hook's one-line reason.
    let line = assert_drv_missing_on_builder(&remote, "missing_drv = \"fail\"");
    assert!(line.starts_with("cuda-sandbox-hook: error:"), "{line}");
}

#[test]
fn remote_build_with_the_drv_on_the_builder_follows_its_tags() {
    if !remote_available("remote_build_with_the_drv_on_the_builder_follows_its_tags") {
        return;
    }
    // The client wrote the .drv to /nix/store, where the builder's hook looks for it (the
    // builder's own store is a chroot store), so `missing_drv` (here "fail") never applies and
    // the derivation's tags decide.
    let builder = Builder::start("fail", Stores::DrvVisible);
    let remote = builder.build("tagged", "cuda");
    assert!(builder.drv_where_the_hook_looks(&remote));
    assert_sees_gpu(remote.report(), "probe-tagged");
    let remote = builder.build("untagged", "-");
    assert!(builder.drv_where_the_hook_looks(&remote));
    assert_sees_nothing(remote.report(), "probe-untagged");
    assert!(remote.hook_lines().is_empty(), "{remote:#?}");
}

/// NixOS/hydra#1565, which the NixOS-CUDA Hydra runs as a patch: the queue runner adds the
/// `.drv` to the paths it copies to the builder before the build, so the builder's hook finds
/// it on disk and reads its tags. `missing_drv` is never consulted: "fail" would fail both.
/// The hook's standard input there is the daemon's, the connection to the client: never read.
#[test]
fn remote_build_with_the_drv_copied_to_the_builder_as_hydra_1565_does_follows_its_tags() {
    if !remote_available(
        "remote_build_with_the_drv_copied_to_the_builder_as_hydra_1565_does_follows_its_tags",
    ) {
        return;
    }
    let builder = Builder::start_with("fail", Stores::Separate, HookAs::ShowingStdin);
    for (attr, mandatory) in [("tagged", "cuda"), ("untagged", "-")] {
        let nonce = nonce();
        let drv = builder.instantiate(attr, &nonce);
        assert!(
            !drv.is_file(),
            "{} is on the builder already",
            drv.display()
        );
        builder.copy_to_builder(&drv);
        assert!(
            drv.is_file(),
            "{} was not copied to the builder",
            drv.display()
        );
        let remote = builder.build_with_nonce(attr, mandatory, &nonce);
        assert_eq!(remote.drv(), drv);
        let name = format!("probe-{attr}");
        if attr == "tagged" {
            assert_sees_gpu(remote.report(), &name);
        } else {
            assert_sees_nothing(remote.report(), &name);
        }
        assert!(remote.hook_lines().is_empty(), "{remote:#?}");
        let stdin = remote
            .builder_log
            .lines()
            .find(|l| l.starts_with("hook-stdin: "))
            .unwrap_or_else(|| panic!("the hook did not run:\n{remote:#?}"));
        let (hook, daemon) = stdin
            .trim_start_matches("hook-stdin: ")
            .split_once(" daemon-stdin: ")
            .unwrap();
        eprintln!("{name} on the builder: {stdin}");
        assert!(
            hook == daemon && (hook.starts_with("socket:") || hook.starts_with("pipe:")),
            "the hook's stdin is not the daemon's connection: {stdin}"
        );
    }
}

#[test]
fn remote_build_with_drv_aterm_fd_follows_the_tags_whatever_missing_drv_says() {
    if !remote_available(
        "remote_build_with_drv_aterm_fd_follows_the_tags_whatever_missing_drv_says",
    ) {
        return;
    }
    // missing_drv = "fail" would fail both builds: the descriptor is what lets them through.
    let builder = Builder::start_with("fail", Stores::Separate, HookAs::WithAtermFd);
    let remote = builder.build("tagged", "cuda");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert_sees_gpu(remote.report(), "probe-tagged");
    assert!(remote.hook_lines().is_empty(), "{remote:#?}");
    let remote = builder.build("untagged", "-");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert_sees_nothing(remote.report(), "probe-untagged");
    assert!(remote.hook_lines().is_empty(), "{remote:#?}");
}

#[test]
fn a_nix_2_34_client_builds_on_a_nix_2_8_builder_over_ssh_ng_and_gets_the_output_back() {
    // Across versions: the client inside the 2.34 root (scripts/with-nix), the builder the
    // host's 2.8 daemon. A 2.8 daemon does not say whether it trusts the client (its protocol,
    // 1.34, is older than the 1.35 that does), so the 2.34 client sends a BasicDerivation
    // (build-remote.cc: trusted or unknown -> buildDerivation) and the .drv is not on the
    // builder when its hook runs: missing_drv decides.
    let test = "a_nix_2_34_client_builds_on_a_nix_2_8_builder_over_ssh_ng_and_gets_the_output_back";
    if !remote_available(test) {
        return;
    }
    if !nix_version().is("2.8") {
        eprintln!("note: {test} runs with the host's Nix 2.8 as the builder");
        return;
    }
    let root = Path::new(&std::env::var("HOME").unwrap()).join(".cache/cuda-sandbox/nix-2.34/root");
    if !root.join("usr/bin/nix-build").exists() {
        let why = "no Nix 2.34 root (run scripts/nix-versions 2.34 as root)";
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: {why}"
        );
        eprintln!("SKIPPED {test}: {why}");
        return;
    }
    let with_nix = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/with-nix");
    let client = run(Command::new(&with_nix).args(["2.34", "nix-build", "--version"]));
    let client = String::from_utf8_lossy(&client.stdout).into_owned();
    assert!(
        NixVersion::parse(client.lines().next().unwrap_or("")).is_some_and(|v| v.is("2.34")),
        "the client is {client}"
    );
    let mut builder = Builder::start("expose", Stores::Separate);
    builder.client_nix = Some("2.34");
    let remote = builder.build("tagged", "cuda");
    assert!(!builder.drv_where_the_hook_looks(&remote));
    assert_sees_gpu(remote.report(), "probe-tagged");
    assert!(
        remote
            .hook_lines()
            .iter()
            .any(|l| l.contains("-probe-tagged.drv is not on disk")),
        "{remote:#?}"
    );
    let remote = builder.build("untagged", "-");
    assert_sees_gpu(remote.report(), "probe-untagged");
}

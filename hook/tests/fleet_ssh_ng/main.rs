//! Nix's own scheduling of a fleet of GPU builders by their `cuda-sm-*` features, over real
//! `ssh-ng`: two builders on loopback (one throwaway `sshd`, `common::ssh`; each builder is its
//! own `nix-daemon --stdio` wrapper, chosen by the URI's `remote-program`, with its own
//! `nix.conf`, `system-features`, hook configuration, fake GPU and log), and a client that can
//! build nothing itself (`max-jobs = 0`, a chroot store of its own) with both in `builders`.
//! The check is `cuda-sandbox-check`'s `devices::features` as the build's builder, on the GPU
//! the builder's real hook exposes (`missing_drv = "expose"`, as on a dedicated GPU builder:
//! ssh-ng sends no `.drv`) and a fake driver playing that builder's GPU. A check requiring
//! `cuda-sm-90a` goes only to the builder advertising it, and passes there on its 9.0; a
//! builder that advertises it over an 8.9 gets the build, and the check fails it; with no
//! builder advertising it, Nix refuses the build, and the test shows Nix's own message. Under
//! every Nix the tests run with (`scripts/with-nix VERSION` as cargo's runner: client,
//! daemons, sshd and hook all that version's).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cuda_sandbox_testkit::{
    driver_mount, hook_config, nonce, workspace_binary, write_script, FakeDevices, NixVersion,
};

#[path = "../common/mod.rs"]
mod common;

use common::ssh::{self, find_program, private_tmp, remote_available, write_file};
use common::HOOK;
use cuda_sandbox_testkit::run_ok;

/// A build that takes longer has hung: fail instead of waiting.
const BUILD_TIMEOUT: Duration = Duration::from_secs(60);

/// One builder: its name, the system features its `nix.conf` and the client's machine line
/// advertise, and the compute capability of its one (fake) GPU.
struct Machine {
    name: &'static str,
    features: &'static [&'static str],
    gpu: &'static str,
}

/// A 9.0 GPU's builder (a few of its features; Nixpkgs' convention gives a 9.0 many more).
const HOPPER: Machine = Machine {
    name: "hopper",
    features: &[
        "cuda",
        "cuda-sm-86",
        "cuda-sm-89",
        "cuda-sm-90",
        "cuda-sm-90a",
    ],
    gpu: "9.0",
};

/// An 8.9 GPU's builder.
const ADA: Machine = Machine {
    name: "ada",
    features: &["cuda", "cuda-sm-86", "cuda-sm-89"],
    gpu: "8.9",
};

/// An 8.6 GPU's builder.
const AMPERE: Machine = Machine {
    name: "ampere",
    features: &["cuda", "cuda-sm-86"],
    gpu: "8.6",
};

/// An 8.9 GPU's builder that advertises what a 9.0 has: a lying advertisement.
const LIAR: Machine = Machine {
    name: "liar",
    features: HOPPER.features,
    gpu: "8.9",
};

/// The builders behind one sshd, and the client's store.
struct Fleet {
    dir: tempfile::TempDir,
    sshd: Child,
    port: u16,
    machines: Vec<&'static Machine>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.sshd.kill();
        let _ = self.sshd.wait();
    }
}

/// What one build through the fleet did.
#[derive(Debug)]
struct Build {
    ok: bool,
    client_log: String,
    /// The output (the runner's report), when it was built.
    output: Option<serde_json::Value>,
    /// Each builder's daemon log from this build, by name.
    builder_logs: Vec<(&'static str, String)>,
}

impl Build {
    /// `devices::features`' message in the report of a build that succeeded.
    fn passed_with(&self) -> &str {
        assert!(self.ok, "the build failed:\n{self:#?}");
        let report = self.output.as_ref().expect("an output");
        let check = &report["checks"]["devices::features"];
        assert_eq!(check["verdict"], "pass", "{report:#}");
        check["message"].as_str().unwrap()
    }

    /// The builders whose daemon ran for this build.
    fn builders_that_ran(&self) -> Vec<&'static str> {
        self.builder_logs
            .iter()
            .filter(|(_, log)| log.contains("remote-daemon --stdio"))
            .map(|(name, _)| *name)
            .collect()
    }
}

impl Fleet {
    /// Starts one sshd and a daemon wrapper per machine.
    fn start(machines: &[&'static Machine]) -> Fleet {
        let dir = tempfile::tempdir_in(private_tmp()).unwrap();
        let d = dir.path();
        let sandbox_paths: Vec<&str> = ["/bin", "/usr", "/lib", "/lib64"]
            .into_iter()
            .filter(|p| Path::new(p).exists())
            .collect();
        let daemon = find_program("nix-daemon").unwrap();
        for machine in machines {
            let m = d.join(machine.name);
            std::fs::create_dir(&m).unwrap();
            // A GPU of its own for the hook to expose, a fake driver playing it, and the hook's
            // configuration.
            let root = m.join("root");
            FakeDevices::create(&root, 1, true).unwrap();
            let driver = m.join("driver");
            run_ok(
                Command::new(workspace_binary("make-fake-driver"))
                    .arg(&driver)
                    .args(["--compute-capability", machine.gpu]),
            );
            let hook_toml = m.join("hook.toml");
            write_file(
                &hook_toml,
                &hook_config(
                    &root,
                    &m,
                    "missing_drv = \"expose\"\n",
                    &["cuda"],
                    &driver_mount(&driver),
                ),
            );
            let conf = m.join("etc-nix");
            std::fs::create_dir(&conf).unwrap();
            write_file(
                &conf.join("nix.conf"),
                &format!(
                    "sandbox = true\nsandbox-fallback = false\nsubstituters =\n\
                     system-features = {}\nsandbox-paths = {}\npre-build-hook = {HOOK}\n",
                    machine.features.join(" "),
                    sandbox_paths.join(" "),
                ),
            );
            write_script(
                &m.join("remote-daemon"),
                &format!(
                    "#!/bin/sh\n\
                     # The {name} builder's nix-daemon: its own nix.conf and hook config; its\n\
                     # stderr is the builder's log.\n\
                     unset NIX_CONFIG NIX_REMOTE\n\
                     export NIX_CONF_DIR={conf}\n\
                     export NIX_USER_CONF_FILES={conf}/nix.conf\n\
                     export CUDA_SANDBOX_CONFIG={hook_toml}\n\
                     echo \"remote-daemon $*\" >> {m}/builder.log\n\
                     exec {daemon} \"$@\" 2>> {m}/builder.log\n",
                    name = machine.name,
                    conf = conf.display(),
                    hook_toml = hook_toml.display(),
                    m = m.display(),
                    daemon = daemon.display(),
                ),
            )
            .unwrap();
        }
        let (sshd, port) = ssh::start_sshd(d);
        Fleet {
            dir,
            sshd,
            port,
            machines: machines.to_vec(),
        }
    }

    fn machine_dir(&self, machine: &Machine) -> PathBuf {
        self.dir.path().join(machine.name)
    }

    /// `machine`'s store URI: the same sshd, its own daemon.
    fn uri(&self, machine: &Machine) -> String {
        format!(
            "ssh-ng://root@127.0.0.1?remote-program={}",
            self.machine_dir(machine).join("remote-daemon").display()
        )
    }

    /// The client's `builders`: each machine with its features, `cuda` mandatory, as a
    /// client's `nix.buildMachines` or a Hydra machines file has a GPU builder.
    fn builders(&self) -> String {
        self.machines
            .iter()
            .map(|machine| {
                format!(
                    "{} {}-linux {} 1 1 {} cuda",
                    self.uri(machine),
                    std::env::consts::ARCH,
                    self.dir.path().join("client_key").display(),
                    machine.features.join(",")
                )
            })
            .collect::<Vec<_>>()
            .join(" ; ")
    }

    fn log(&self, machine: &Machine) -> String {
        std::fs::read_to_string(self.machine_dir(machine).join("builder.log")).unwrap_or_default()
    }

    /// Builds fleet.nix requiring `features` (a fresh nonce) from the client.
    fn build(&self, features: &str) -> Build {
        let before: Vec<usize> = self.machines.iter().map(|m| self.log(m).len()).collect();
        let runner = workspace_binary("cuda-sandbox-check");
        let client_store = self.dir.path().join("client-store");
        let nix_config = [
            "substituters =".to_string(),
            "builders-use-substitutes = false".to_string(),
            "system-features =".to_string(),
            "max-jobs = 0".to_string(),
            format!("builders = {}", self.builders()),
            format!("store = local?root={}", client_store.display()),
        ]
        .join("\n");
        let (stdout, stderr) = (
            self.dir.path().join("stdout"),
            self.dir.path().join("stderr"),
        );
        let start = Instant::now();
        let mut child = Command::new("nix-build")
            .arg(common::nix_file("fleet.nix"))
            .args(["--no-out-link", "--argstr", "nonce", &nonce()])
            .args(["--argstr", "runner", runner.to_str().unwrap()])
            .args(["--argstr", "features", features])
            .env("NIX_CONFIG", nix_config)
            .env("NIX_SSHOPTS", ssh::ssh_opts(self.port))
            .env_remove("CUDA_SANDBOX_CONFIG")
            .env_remove("NIX_REMOTE")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("run nix-build");
        let Some(status) = ssh::wait_at_most(&mut child, start, BUILD_TIMEOUT) else {
            panic!(
                "nix-build requiring {features} took over {BUILD_TIMEOUT:?}:\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        eprintln!(
            "nix-build requiring {features} via the fleet: {:?}",
            start.elapsed()
        );
        let output = std::fs::read_to_string(&stdout)
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with('/'))
            .map(|out| {
                let text = std::fs::read_to_string(client_store.join(out.trim_start_matches('/')))
                    .unwrap();
                serde_json::from_str(&text).unwrap()
            });
        Build {
            ok: status.success(),
            client_log: std::fs::read_to_string(&stderr).unwrap_or_default(),
            output,
            builder_logs: self
                .machines
                .iter()
                .zip(before)
                .map(|(m, from)| (m.name, self.log(m)[from..].to_string()))
                .collect(),
        }
    }
}

// The tests, one module per tier (docs/testing.md).
mod sandbox;

//! Many tagged builds at once through the real Nix sandbox: the closure cache and the
//! manifests stay whole, and with `gpus_per_build` each build gets a GPU of its own, which a
//! killed build gives back. Needs root and `nix-build`; under `CI=true` these tests fail
//! rather than skip when either is missing.

use cuda_sandbox_hook::closure::ClosureCache;
use cuda_sandbox_hook::lease::{Leases, Slot};
use cuda_sandbox_hook::mig::InstanceId;
use cuda_sandbox_manifest::Manifest;
use cuda_sandbox_testkit::fake_mig::{ci_minor, gi_minor};
use cuda_sandbox_testkit::{
    hook_config, nix_available, nonce, FakeDevices, FakeMig, FakePci, NixSandbox, NixVersion,
};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;

use common::{nix_file, root_of, HOOK};

/// One test at a time: Nix kills leftover processes of a build user when it hands that user
/// to a new build, so another test's builds could end the orphan the killed-build test
/// watches, and parallel builds would blur the timing of the GPU-per-build test.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fake host with `gpus` GPU nodes and a config leasing `gpus_per_build` of them.
struct Host {
    dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
    /// Nix settings every build on this host gets (see [`Host::allocating_ids`]).
    settings: Vec<String>,
    /// The system features nested-escape.nix requires here.
    build_features: &'static str,
}

impl Host {
    fn new(gpus: u64, gpus_per_build: u32, lease_wait_seconds: u64, driver: bool) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        FakeDevices::create(&root, gpus, true).unwrap();
        let config = dir.path().join("config.toml");
        let driver = if driver {
            "[[rule.path]]\npath = \"/run/opengl-driver\"\nrequired = true\n"
        } else {
            ""
        };
        let top = format!(
            "gpus_per_build = {gpus_per_build}\nlease_wait_seconds = {lease_wait_seconds}\n"
        );
        std::fs::write(
            &config,
            hook_config(&root, dir.path(), &top, &["cuda"], driver),
        )
        .unwrap();
        Host {
            dir,
            root,
            config,
            settings: Vec::new(),
            build_features: "cuda",
        }
    }

    /// This host, its Nix allocating build ids (`auto-allocate-uids`, with `cgroups` for
    /// `uid-range` builds) from `start_id` (see [`start_id`]), with `extra` settings, and
    /// `uid-range` among its system features.
    fn allocating_ids(mut self, start_id: u64, extra: &[&str]) -> Host {
        self.settings = [
            "experimental-features = auto-allocate-uids cgroups".to_string(),
            "auto-allocate-uids = true".to_string(),
            format!("start-id = {start_id}"),
        ]
        .into_iter()
        .chain(extra.iter().map(|s| s.to_string()))
        .collect();
        self
    }

    /// This host, nested-escape.nix a `uid-range` build on it.
    fn in_uid_range(mut self) -> Host {
        self.build_features = "cuda uid-range";
        self
    }

    /// One GPU split into the MIG `instances` (GPU 0, GI, CI 0), with their capability nodes,
    /// one instance leased per build.
    fn mig(gis: &[u32], lease_wait_seconds: u64) -> Host {
        let host = Host::new(1, 1, lease_wait_seconds, false);
        let instances: Vec<(u32, u32, u32)> = gis.iter().map(|gi| (0, *gi, 0)).collect();
        FakeMig::create(&host.root, &instances, true).unwrap();
        let mut text = std::fs::read_to_string(&host.config).unwrap();
        text.push_str("[rule.mig]\n");
        std::fs::write(&host.config, text).unwrap();
        host
    }

    fn sandbox(&self, max_jobs: usize) -> NixSandbox {
        let mut s = NixSandbox::with_hook(Path::new(HOOK), &self.config);
        s.extra_settings.push(format!("max-jobs = {max_jobs}"));
        s.extra_settings.extend(self.settings.iter().cloned());
        if !self.settings.is_empty() {
            s.system_features.push_str(" uid-range");
        }
        s
    }

    /// Starts `nix-build` of `file` with `--argstr` pairs `args` in the background, one job,
    /// in a process group of its own (so a test can kill it and everything it started, as a
    /// crash would), its output discarded.
    fn spawn_build(&self, file: &str, args: &[(&str, &str)]) -> std::process::Child {
        self.spawn_build_with(self.sandbox(1), file, args, &[])
    }

    /// As [`Host::spawn_build`], under `sandbox` and with `extra` arguments to nix-build.
    fn spawn_build_with(
        &self,
        sandbox: NixSandbox,
        file: &str,
        args: &[(&str, &str)],
        extra: &[&str],
    ) -> std::process::Child {
        let mut build = Command::new("nix-build");
        build.arg(nix_file(file)).arg("--no-out-link").args(extra);
        for (name, value) in args {
            build.args(["--argstr", name, value]);
        }
        build
            .env("NIX_CONFIG", sandbox.nix_config())
            .env("CUDA_SANDBOX_CONFIG", &self.config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap()
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// Builds a fake driver store path (three paths in its closure) and links
    /// `root/run/opengl-driver` to it. Returns the closure.
    fn install_store_driver(&self) -> Vec<PathBuf> {
        let build =
            self.sandbox(1)
                .build(&nix_file("driver-store.nix"), &[("nonce", &nonce())], &[]);
        assert!(
            build.ok(),
            "building the fake driver failed:\n{}",
            build.log
        );
        let driver = build.out_paths[0].clone();
        std::fs::create_dir_all(self.root.join("run")).unwrap();
        std::os::unix::fs::symlink(&driver, self.root.join("run/opengl-driver")).unwrap();
        cuda_sandbox_elfkit::requisites(Path::new("nix-store"), Path::new(&driver)).unwrap()
    }
}

/// What one build of concurrent.nix reported.
#[derive(Debug)]
struct Report {
    start: f64,
    end: f64,
    nodes: Vec<String>,
    manifest: Manifest,
    lines: Vec<String>,
}

fn report(text: &str) -> Report {
    let time = |key: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key:?} line in:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    };
    let manifest = text
        .lines()
        .find_map(|l| l.strip_prefix("manifest "))
        .unwrap_or_else(|| panic!("no manifest line in:\n{text}"));
    Report {
        start: time("start "),
        end: time("end "),
        nodes: text
            .lines()
            .filter_map(|l| l.strip_prefix("char "))
            .map(str::to_string)
            .collect(),
        manifest: serde_json::from_str(manifest)
            .unwrap_or_else(|e| panic!("{e}: the build saw a torn manifest: {manifest}")),
        lines: text.lines().map(str::to_string).collect(),
    }
}

/// Builds `count` derivations of concurrent.nix with `max-jobs = count`; returns the reports
/// by derivation name.
fn build_many(
    host: &Host,
    count: usize,
    args: &[(&str, &str)],
) -> (bool, String, BTreeMap<String, Report>) {
    let nonce = nonce();
    let count_text = count.to_string();
    let mut argstrs = vec![("nonce", nonce.as_str()), ("count", count_text.as_str())];
    argstrs.extend_from_slice(args);
    let build = host
        .sandbox(count)
        .build(&nix_file("concurrent.nix"), &argstrs, &[]);
    let mut reports = BTreeMap::new();
    for out in &build.out_paths {
        let name = out.file_name().unwrap().to_string_lossy();
        let name = name.split_once('-').unwrap().1.to_string();
        reports.insert(name, report(&std::fs::read_to_string(out).unwrap()));
    }
    (build.ok(), build.log, reports)
}

/// Files a writer left half-done: tempfile's `.tmp*` names.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

/// The pids of processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .collect()
}

/// `cuda-sandbox-hook explain --features cuda` under the host's config.
fn explain(host: &Host) -> String {
    common::explain_output(&host.config, "cuda", false)
}

/// SIGKILL to the process group `pgid`; whether there was one.
fn kill_group(pgid: i32) -> bool {
    Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts that a build now cannot get the one GPU: another build (`holder`) still holds it.
fn assert_gpu_held(host: &Host, holder: &str) {
    let (ok, log, _) = build_many(host, 1, &[]);
    let all_leased = ["all 1 GPUs", "all 1 MIG instances"]
        .iter()
        .any(|all| log.contains(&format!("{all} are leased by other builds")));
    assert!(
        !ok && all_leased,
        "another build got the GPU {holder} holds:\n{log}"
    );
}

/// Ends every process of the build marked `marker` (SIGKILL; its builder is PID 1 of its
/// namespace, so that ends the rest) and waits up to 10 s for them to be gone.
fn end_processes_with(marker: &str) {
    for pid in processes_with(marker) {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    wait_for(
        "the build's processes to end",
        Duration::from_secs(10),
        || processes_with(marker).is_empty(),
    );
}

/// Asserts that the GPU is free again: a build gets it.
fn assert_gpu_free(host: &Host) {
    let (ok, log, _) = build_many(host, 1, &[]);
    assert!(ok, "the GPU stayed leased after the build ended:\n{log}");
}

/// Kills a background `nix-build`'s process group (none when `group` is 0) and the builders
/// holding `marker` (each in a session of its own) when a test ends, passed or failed.
struct KillOnDrop {
    group: i32,
    marker: String,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.group > 0 {
            kill_group(self.group);
        }
        for pid in processes_with(&self.marker) {
            kill_group(pid);
        }
    }
}

/// Runs nested-escape.nix on `host`, whose one slot is `slot`: the build keeps a nested PID
/// namespace's init in its chroot, leaves the chroot, and once a hook has recorded what it saw,
/// kills that init and runs on. Its lease must hold until the build itself ends.
fn a_build_cannot_end_its_own_lease_early(host: &Host, slot: Slot) {
    let n = nonce();
    // The handshake directory the build waits in, shared with the sandbox.
    let handshake = host.dir.path().join("handshake");
    std::fs::create_dir(&handshake).unwrap();
    std::fs::set_permissions(&handshake, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let mut sandbox = host.sandbox(1);
    sandbox
        .sandbox_paths
        .push(handshake.to_string_lossy().into_owned());
    let mut run = host.spawn_build_with(
        sandbox,
        "nested-escape.nix",
        &[
            ("nonce", &n),
            ("handshake", handshake.to_str().unwrap()),
            ("features", host.build_features),
        ],
        &[],
    );
    let escaped = format!("escaped-{n}");
    let nested = format!("nested-{n}");
    let _cleanup = KillOnDrop {
        group: run.id() as i32,
        marker: escaped.clone(),
    };
    let leases = Leases::new(&host.run_dir());
    wait_for("the lease", Duration::from_secs(60), || {
        leases.record(slot).is_some()
    });
    let lease = leases.record(slot).unwrap();
    assert!(
        lease.derivation.ends_with("-nested-escape.drv"),
        "{lease:?}"
    );
    wait_for(
        "the builder to leave its chroot, with a nested init left there",
        Duration::from_secs(60),
        || {
            let out = processes_with(&escaped);
            let inside = processes_with(&nested);
            !out.is_empty()
                && out
                    .iter()
                    .all(|p| root_of(*p as u32) != Some(lease.chroot_id))
                && inside
                    .iter()
                    .any(|p| root_of(*p as u32) == Some(lease.chroot_id))
        },
    );
    // This build's hook sweeps the leases and records what it saw of the build.
    assert_gpu_held(host, "the build in its chroot");
    // What it recorded is the build's own PID 1 (which left the chroot), not the nested init.
    let recorded = leases.record(slot).unwrap().builders;
    let builder = processes_with(&escaped);
    assert!(
        !recorded.is_empty() && recorded.iter().all(|b| builder.contains(&(b.pid as i32))),
        "recorded {recorded:?}, the build's PID 1 is {builder:?}"
    );
    // The build kills the nested init, and every other process but its own PID 1.
    std::fs::write(handshake.join("go"), "").unwrap();
    wait_for(
        "the build to kill its nested init",
        Duration::from_secs(60),
        || handshake.join("killed").exists() && processes_with(&nested).is_empty(),
    );
    assert!(!processes_with(&escaped).is_empty(), "the build ended");
    assert_gpu_held(host, "the build that killed its nested init");
    end_processes_with(&escaped);
    assert_gpu_free(host);
    // The builder's end fails the build.
    assert!(!run.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&lease.chroot);
}

/// A program that opens the device `argv[1]`, listens on the abstract Unix socket named
/// `argv[2]`, and sends the descriptor (`SCM_RIGHTS`, unix(7)) to the first process that
/// connects: what a build can do from the host's network namespace. It listens rather than
/// connects because Nix 2.34.8 (built with Landlock, on a kernel with Landlock ABI 6) keeps a
/// fixed-output builder from connecting to abstract sockets outside its sandbox, while
/// processes outside may still connect in (`setupLandlock` in Nix's
/// `src/libstore/unix/build/linux-derivation-builder.cc`).
const SEND_FD_C: &str = r#"
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int dev = open(argv[1], O_RDWR);
    if (dev < 0) { perror(argv[1]); return 1; }
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    size_t n = strlen(argv[2]);
    if (n + 1 > sizeof a.sun_path) return 2;
    memcpy(a.sun_path + 1, argv[2], n);
    socklen_t len = offsetof(struct sockaddr_un, sun_path) + 1 + n;
    if (bind(s, (struct sockaddr *)&a, len) < 0 || listen(s, 1) < 0) { perror("bind"); return 1; }
    int c = accept(s, NULL, NULL);
    if (c < 0) { perror("accept"); return 1; }
    char byte = 'g';
    struct iovec iov = { &byte, 1 };
    union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = u.buf, .msg_controllen = sizeof u.buf };
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &dev, sizeof(int));
    if (sendmsg(c, &m, 0) != 1) { perror("sendmsg"); return 1; }
    return 0;
}
"#;

/// A host process, in this process's network namespace, that connects to the abstract Unix
/// socket `name` as soon as one listens there, until `stop` is set, and returns the device
/// numbers (`st_rdev`) of the descriptors it is sent.
fn receive_descriptors(
    name: &str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<u64>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
    std::thread::spawn(move || {
        let stream = loop {
            if let Ok(s) = std::os::unix::net::UnixStream::connect_addr(&addr) {
                break s;
            }
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                return Vec::new();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut byte = [0u8; 1];
        let mut iov = [std::io::IoSliceMut::new(&mut byte)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let Ok(msg) = recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::empty(),
        ) else {
            return Vec::new();
        };
        let mut rdevs = Vec::new();
        for c in msg.cmsgs().into_iter().flatten() {
            if let ControlMessageOwned::ScmRights(fds) = c {
                for fd in fds {
                    // SAFETY: the kernel installed `fd` in this process for this message.
                    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
                    rdevs.push(file.metadata().unwrap().rdev());
                }
            }
        }
        rdevs
    })
}

/// The first Nix with `auto-allocate-uids` (an experimental feature since 2.12, per the Nix
/// manual's list of settings).
const AUTO_ALLOCATE_UIDS_SINCE: NixVersion = NixVersion {
    major: 2,
    minor: 12,
    patch: 0,
};

/// The first id a Nix of `version` allocates build ids from in these tests: each version its
/// own, since every version's default `start-id` is 872415232 (the Nix manual's settings), a
/// Nix kills what runs as a build uid when it takes it (nix_versions.rs,
/// no_two_nix_installations_here_share_a_build_uid), and the versions share the host's cgroup
/// tree, where a Nix destroys an earlier `nix-build-uid-<uid>` cgroup of the same name.
fn start_id(version: NixVersion) -> u64 {
    872_415_232 + u64::from(version.minor) * 8_388_608
}

/// The uids of process `pid` (real, effective, saved, filesystem).
fn uids_of(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find_map(|l| l.strip_prefix("Uid:"))?.to_string();
            Some(
                line.split_whitespace()
                    .filter_map(|u| u.parse().ok())
                    .collect(),
            )
        })
        .unwrap_or_default()
}

/// The GPU instances of a 7-slice H200 (1g × 7).
const SEVEN_GIS: [u32; 7] = [7, 8, 9, 10, 11, 12, 13];

/// The capability nodes of instance (0, `gi`, 0).
fn mig_nodes(gi: u32) -> Vec<String> {
    [gi_minor(0, gi), ci_minor(0, gi, 0)]
        .iter()
        .map(|m| format!("/dev/nvidia-caps/nvidia-cap{m}"))
        .collect()
}

/// The MIG capability nodes a build saw.
fn caps_seen(r: &Report) -> Vec<String> {
    let mut caps: Vec<String> = r
        .nodes
        .iter()
        .filter(|n| n.starts_with("/dev/nvidia-caps/"))
        .cloned()
        .collect();
    caps.sort();
    caps
}

// The tests, one module per tier (docs/testing.md).
mod sandbox;

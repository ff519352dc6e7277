//! The hook's trust rules, attacked for real: a real unprivileged user (made here with `useradd`)
//! plants what it can, and the hook (run as root, as Nix runs it) must not follow. Needs root;
//! under `CI=true` missing root is a failure, not a skip.

use cuda_sandbox_testkit::{root_available, write_script};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../common/mod.rs"]
mod common;

use common::HOOK;

const USER: &str = "cudasbx-redteam";

/// The test user's uid and gid (its own group's): fixed, and outside every build-user range a Nix here uses (the
/// host's nixbld users, and 32601-32632 / 33401-33432 in the Nix 2.26 / 2.34 roots of
/// scripts/nix-versions). A uid `useradd --system` picked could be a build user's on the host
/// (it was: 994 in the 2.34 root is the host's nixbld3), and a Nix that takes a build user
/// kills every process of its uid, whichever root made it, so a build elsewhere on the machine
/// could end this test's processes.
const USER_ID: u32 = 30_901;

/// The test user's uid and gid, creating the user (no home, no shell) the first time, once
/// per process (tests run in threads).
fn unprivileged_user() -> (u32, u32) {
    static MADE: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *MADE.get_or_init(|| {
        let id = |flag: &str| {
            let out = Command::new("id").args([flag, USER]).output().unwrap();
            out.status.success().then(|| {
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse::<u32>()
                    .unwrap()
            })
        };
        if id("-u").is_some_and(|uid| uid != USER_ID) || id("-g").is_some_and(|g| g != USER_ID) {
            // Made by an earlier version of this test with a uid of useradd's choosing.
            let out = Command::new("userdel").arg(USER).output().unwrap();
            assert!(
                out.status.success(),
                "userdel: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if id("-u").is_none() {
            let uid = USER_ID.to_string();
            // Its own group, with the same fixed id (a gid of groupadd's choosing was the
            // host's nixbld group in one root).
            let _ = Command::new("groupdel").arg(USER).output();
            let _ = Command::new("groupadd")
                .args(["--system", "--gid", &uid, USER])
                .output()
                .unwrap();
            let out = Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                ])
                .args(["--uid", &uid, "--gid", &uid, USER])
                .output()
                .unwrap();
            // Another test binary may have made it meanwhile.
            assert!(
                out.status.success() || id("-u").is_some(),
                "useradd: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let made = (id("-u").unwrap(), id("-g").unwrap());
        assert_eq!(made, (USER_ID, USER_ID), "{USER} has another uid or gid");
        made
    })
}

/// Runs `program args` as the unprivileged user.
fn as_user(program: &str, args: &[&Path]) {
    let (uid, gid) = unprivileged_user();
    let out = Command::new(program)
        .args(args)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{program} as {USER}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    /// A fake host root with the GPU nodes (directories stand for devices), a driver link into
    /// a fake store, and a directory the unprivileged user owns (`user/`).
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        // The user must be able to reach its own directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let h = Host { dir };
        for d in [
            "root/dev/nvidiactl",
            "root/dev/nvidia0",
            "root/run",
            "chroot",
            "trusted",
        ] {
            std::fs::create_dir_all(h.path(d)).unwrap();
        }
        std::fs::create_dir_all(h.path("store/aaa-driver/lib")).unwrap();
        std::os::unix::fs::symlink(h.path("store/aaa-driver"), h.path("root/run/opengl-driver"))
            .unwrap();
        write_script(
            &h.path("trusted/nix-store"),
            &format!(
                "#!/bin/sh\necho \"$3\"\necho {}/bbb-dep\n",
                h.path("store").display()
            ),
        )
        .unwrap();
        let (uid, gid) = unprivileged_user();
        std::fs::create_dir(h.path("user")).unwrap();
        std::os::unix::fs::chown(h.path("user"), Some(uid), Some(gid)).unwrap();
        h
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A config (written by root, mode 0644) at `at`; `top` adds keys.
    fn config(&self, at: &str, top: &str) -> PathBuf {
        let p = self.path(at);
        std::fs::write(
            &p,
            format!(
                "host_root = \"{}\"\nstore_dir = \"{}\"\nruntime_dir = \"{}\"\n\
                 closure_cache = \"{}\"\n{top}[[rule]]\nname = \"gpu\"\nfeatures = [\"cuda\"]\n\
                 [[rule.device]]\nglob = \"/dev/nvidia*\"\nrequired = true\n\
                 [[rule.path]]\npath = \"/run/opengl-driver\"\nrequired = true\n",
                self.path("root").display(),
                self.path("store").display(),
                self.path("state/run").display(),
                self.path("state/cache").display(),
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        p
    }

    fn trusted_config(&self, top: &str) -> PathBuf {
        let nix_store = format!(
            "nix_store = \"{}\"\n",
            self.path("trusted/nix-store").display()
        );
        self.config("trusted/config.toml", &format!("{nix_store}{top}"))
    }

    fn hook(&self, config: &Path) -> Output {
        let drv = self.path("tagged.drv");
        std::fs::write(
            &drv,
            r#"Derive([("out","/nix/store/x-out","","")],[],[],"x86_64-linux","/bin/sh",[],[("out","/nix/store/x-out"),("requiredSystemFeatures","cuda")])"#,
        )
        .unwrap();
        Command::new(HOOK)
            .arg(&drv)
            .arg(self.path("chroot"))
            .env("CUDA_SANDBOX_CONFIG", config)
            .output()
            .unwrap()
    }
}

fn refused(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "not refused: {err}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for n in needles {
        assert!(err.contains(n), "{err} lacks {n:?}");
    }
}

fn passes(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the hook as Nix would for a derivation requiring `features` under `config`, and
/// fails the test when it has not exited after `limit` (killing it): a hang, not a verdict.
fn hook_within(h: &Host, config: &Path, features: &str, limit: std::time::Duration) -> Output {
    let drv = h.path(&format!("{}.drv", features.replace(' ', "-")));
    std::fs::write(
        &drv,
        format!(
            r#"Derive([("out","/nix/store/x-out","","")],[],[],"x86_64-linux","/bin/sh",[],[("out","/nix/store/x-out"),("requiredSystemFeatures","{features}")])"#
        ),
    )
    .unwrap();
    let mut child = Command::new(HOOK)
        .arg(&drv)
        .arg(h.path("chroot"))
        .env("CUDA_SANDBOX_CONFIG", config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the hook hung for {features:?} under {}", config.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// `nobody`, a user every system has: the uid and gid the kernel's own overflow ids use.
const NOBODY: (u32, u32) = (65534, 65534);

/// Runs `ln -s target link` as `nobody`.
fn link_as_nobody(target: &Path, link: &Path) {
    let out = Command::new("ln")
        .arg("-s")
        .arg(target)
        .arg(link)
        .uid(NOBODY.0)
        .gid(NOBODY.1)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ln -s as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = std::fs::symlink_metadata(link).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.uid(), NOBODY.0, "the link is nobody's");
}

/// A root-owned file of `mode` at `at` holding `text`, as every store path is root's,
/// whoever had it built or added.
fn store_file(at: &Path, text: &str, mode: u32) {
    std::fs::write(at, text).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A directory at `at`, root's, with `mode` (`1777` for a sticky one anyone can write in).
fn dir_with_mode(at: &Path, mode: u32) {
    std::fs::create_dir_all(at).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(mode)).unwrap();
}

// The tests, one module per tier (docs/testing.md).
mod root;

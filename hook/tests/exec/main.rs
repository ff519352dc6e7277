//! `cuda-sandbox-hook exec`: a command in a private mount namespace with exactly what the hook
//! exposes. Needs root (and the workspace's runner and fake driver, built by
//! `cargo build --workspace`); under `CI=true` a missing root fails instead of skipping.

use cuda_sandbox_testkit::terminal::run_on_a_fresh_terminal;
use cuda_sandbox_testkit::{root_available, workspace_binary, FakeDevices};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;

use common::HOOK;

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    /// Two GPUs on the host; the config exposes only `nvidia0`, plus the fake driver behind a
    /// driver link and a kernel module version.
    fn new() -> Host {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        FakeDevices::create(&root, 2, true).unwrap();
        std::fs::create_dir_all(root.join("proc/driver/nvidia")).unwrap();
        std::fs::write(
            root.join("proc/driver/nvidia/version"),
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  (FAKE)\n",
        )
        .unwrap();
        let out = Command::new(workspace_binary("make-fake-driver"))
            .arg(root.join("run/opengl-driver/lib"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(
            dir.path().join("config.toml"),
            format!(
                "host_root = \"{}\"\nruntime_dir = \"{}\"\nclosure_cache = \"{}\"\n\
                 [[rule]]\nname = \"nvidia\"\nfeatures = [\"cuda\"]\n\
                 [[rule.device]]\nglob = \"/dev/nvidia0\"\nrequired = true\n\
                 [[rule.device]]\nglob = \"/dev/nvidiactl\"\nrequired = true\n\
                 [[rule.device]]\nglob = \"/dev/nvidia-uvm\"\nrequired = true\n\
                 [rule.driver]\ncompat = []\n",
                root.display(),
                dir.path().join("run").display(),
                dir.path().join("cache").display()
            ),
        )
        .unwrap();
        Host { dir }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    /// `exec --features cuda --config … --bind OUT --env LD_LIBRARY_PATH=… -- command`, as
    /// a command line (the driver directory is on the loader's path, as in a Nix build).
    fn exec_command(&self, command: &[&str]) -> Command {
        self.exec_command_with(&[], command)
    }

    /// [`Host::exec_command`] with more options for exec (before the `--`).
    fn exec_command_with(&self, options: &[&str], command: &[&str]) -> Command {
        let out = self.dir.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        // exec runs the command as nobody, like a build user: its output directory is its own.
        std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
        let mut cmd = Command::new(HOOK);
        cmd.args(["exec", "--features", "cuda", "--config"])
            .arg(self.config())
            .arg("--bind")
            .arg(&out)
            .args(["--env", "LD_LIBRARY_PATH=/run/opengl-driver/lib"])
            .args(options)
            .arg("--")
            .args(command);
        cmd
    }

    fn exec(&self, command: &[&str]) -> Output {
        self.exec_command(command).output().unwrap()
    }

    /// Runs `sh -c script` under exec; it must succeed and print every line of `expected`.
    /// Returns what it printed.
    fn run_script(&self, script: &str, expected: &[&str]) -> String {
        let out = self.exec(&["/bin/sh", "-c", script]);
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        for line in expected {
            assert!(t.lines().any(|l| l == *line), "{line:?} missing:\n{t}");
        }
        t
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Compiles `source` to `dir/name` with `cc` and `extra` arguments.
fn compile(dir: &Path, name: &str, source: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let cc = Command::new("cc")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .args(extra)
        .output()
        .unwrap();
    assert!(cc.status.success(), "cc: {}", text(&cc));
    out
}

/// Runs `cmd` for at most `seconds`; `None` (after killing it) when it did not finish.
fn output_within(mut cmd: Command, seconds: u64) -> Option<Output> {
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Prints what the command can do to the terminal exec was started from: TIOCSTI on each
/// standard stream and on /dev/tty, and its controlling terminal (`tty_nr` of /proc/self/stat).
const TTY_PROBE: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
static const char line[] = "echo INJECTED-BY-THE-COMMAND\n";
static void type_into(int fd, const char *what) {
    for (const char *c = line; *c; c++) {
        if (ioctl(fd, TIOCSTI, c) != 0) {
            printf("TIOCSTI %s: refused: %s\n", what, strerror(errno));
            return;
        }
    }
    printf("TIOCSTI %s: TYPED\n", what);
}
int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    type_into(0, "stdin");
    type_into(1, "stdout");
    type_into(2, "stderr");
    int tty = open("/dev/tty", O_RDWR);
    if (tty < 0) printf("/dev/tty: %s\n", strerror(errno));
    else type_into(tty, "/dev/tty");
    char stat[512] = {0};
    FILE *f = fopen("/proc/self/stat", "r");
    if (f && fread(stat, 1, sizeof stat - 1, f) > 0) {
        int ppid, pgrp, session, tty_nr;
        char state;
        if (sscanf(strrchr(stat, ')') + 2, "%c %d %d %d %d", &state, &ppid, &pgrp, &session,
                   &tty_nr) == 5)
            printf("tty_nr %d\n", tty_nr);
    }
    printf("isatty %d %d %d\n", isatty(0), isatty(1), isatty(2));
    return 0;
}
"#;

/// What `exec` plans for `program` on `host` (its `prepare`, with exec's environment and the
/// corpus bound), and the closure it computed: the libcuda.so.1 its process loads there.
fn exec_libcuda(host: &Host, program: &Path, corpus: &Path) -> Option<PathBuf> {
    use cuda_sandbox_hook::exec::{self, ExecRequest};
    let req = ExecRequest {
        drv: None,
        features: vec!["cuda".into()],
        config: Some(host.config()),
        extra_binds: vec![corpus.to_path_buf()],
        command: vec![program.into()],
        user: exec::DEFAULT_USER,
        env: vec!["LD_LIBRARY_PATH=/run/opengl-driver/lib".into()],
        environment: cuda_sandbox_hook::request::Environment::default(),
        caller_env: Vec::new(),
    };
    let mut resolved = exec::resolve(&req);
    let chroot = tempfile::tempdir().unwrap();
    resolved.chroot = Some(chroot.path().to_path_buf());
    let env = exec::environment(&req.env, Path::new("/nix/store"), |_| None).unwrap();
    let user_binds = [exec::UserBind::open(corpus, req.user).unwrap()];
    let prepared = exec::prepare(&req, &resolved, &user_binds, &env).unwrap();
    let libcuda = prepared
        .closure
        .named
        .iter()
        .find(|(name, _)| name == "libcuda.so.1")
        .map(|(_, path)| path.clone());
    // What it found is what it makes visible inside.
    if let Some(l) = &libcuda {
        assert!(
            prepared.binds.iter().any(|b| l.starts_with(&b.inside)),
            "{prepared:?}"
        );
    }
    libcuda
}

/// Runs `ln -s target link` as nobody (uid and gid 65534), the user exec runs commands as.
fn link_as_nobody(target: &Path, link: &Path) {
    use std::os::unix::process::CommandExt;
    let out = Command::new("ln")
        .arg("-s")
        .arg(target)
        .arg(link)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(out.status.success(), "ln -s as nobody: {}", text(&out));
}

// The tests, one module per tier (docs/testing.md).
mod root;

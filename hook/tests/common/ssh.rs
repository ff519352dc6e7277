//! Real `ssh-ng` builders on loopback, for the tests of remote builds (`remote_build.rs`,
//! `fleet_ssh_ng.rs`): a throwaway `sshd` on 127.0.0.1 (its own host key, config and
//! authorised client key in a directory of the test; killed by the test), and what the tests
//! need around it. Needs root, `nix-build`, `ssh`, `ssh-keygen` and `sshd` (Debian:
//! openssh-client, openssh-server). Outside CI a missing one skips with a printed reason; under
//! `CI=true` it is a failure.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cuda_sandbox_testkit::{nix_available, run_ok};

/// What CI must install for these tests.
pub const APT: &str = "apt-get install -y openssh-server openssh-client";

/// `name` found in PATH or in the sbin directories (sshd lives in /usr/sbin).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Whether the remote-build tests can run: root and Nix ([`nix_available`]), then the SSH
/// programs. Under `CI=true` a missing one panics with the line that installs it.
pub fn remote_available(test: &str) -> bool {
    if !nix_available(test) {
        return false;
    }
    let missing: Vec<&str> = ["sshd", "ssh", "ssh-keygen", "nix-daemon"]
        .into_iter()
        .filter(|p| find_program(p).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let why = format!("{} not found (Debian: {APT})", missing.join(", "));
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test} must run in CI: {why}");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// Where the tests' directories go: a root-owned directory no one else can write, never
/// `/tmp`. Nix 2.34 refuses to build into a chroot store below a world-writable directory
/// ("Path \"/tmp\" is world-writable or a symlink"); Nix 2.8 did not check.
pub fn private_tmp() -> PathBuf {
    let dir = PathBuf::from("/var/lib/cuda-sandbox-tests");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A file with mode 0644 whatever the umask (the hook refuses configs others can write).
pub fn write_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// Starts `sshd -D -e` on a free port of 127.0.0.1 with a config in `dir`; retries on another
/// port when the chosen one was taken meanwhile. Makes the keys first: the server's host key
/// (`dir/host_key`) and a client key (`dir/client_key`) authorised for root.
pub fn start_sshd(dir: &Path) -> (Child, u16) {
    for key in ["host_key", "client_key"] {
        run_ok(
            Command::new(find_program("ssh-keygen").unwrap())
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.join(key)),
        );
    }
    std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
    // sshd refuses to start without its privilege separation directory.
    std::fs::create_dir_all("/run/sshd").unwrap();
    let sshd = find_program("sshd").unwrap();
    let mut last_log = String::new();
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.join("sshd_config");
        write_file(
            &config,
            &format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n\
                 AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n\
                 PubkeyAuthentication yes\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n\
                 PidFile {d}/sshd.pid\nLogLevel INFO\n",
                d = dir.display()
            ),
        );
        let log = dir.join("sshd.log");
        let mut child = Command::new(&sshd)
            .arg("-f")
            .arg(&config)
            .args(["-D", "-e"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", sshd.display()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (child, port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        last_log = std::fs::read_to_string(&log).unwrap_or_default();
    }
    panic!("sshd did not start:\n{last_log}");
}

/// `NIX_SSHOPTS` for an sshd of [`start_sshd`] on `port`.
pub fn ssh_opts(port: u16) -> String {
    format!(
        "-F none -p {port} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
         -o BatchMode=yes -o LogLevel=ERROR -o ConnectTimeout=10"
    )
}

/// Waits for `child` (a client `nix-build`), polling every 20 ms, for at most `timeout` from
/// `start`: its exit status, or `None` after killing it when it ran longer.
pub fn wait_at_most(
    child: &mut Child,
    start: Instant,
    timeout: Duration,
) -> Option<std::process::ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

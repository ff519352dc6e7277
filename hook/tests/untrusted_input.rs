//! Untrusted input in linear time and bounded memory: derivations as ATerm, their
//! `__json`, derivations as JSON (`DRV_ATERM_FD`, `NIX_DERIVATION_V4`), and what
//! `DRV_ATERM_FD` may name. The time bounds are so generous that only super-linear code can
//! miss them: 8 MiB in under 10 s in a debug build, where the quadratic `__json` reader of
//! f51a825 needed minutes (2 MiB took it 55 s).

use cuda_sandbox_hook::drv::{DrvAttrs, DrvEnv, DrvError, JsonDerivation};
use cuda_sandbox_hook::request::{read_aterm_fd, AtermFdError, FdLimits, ATERM_FD_LIMITS};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::HOOK;

const SIZE: usize = 8 << 20;
const BOUND: Duration = Duration::from_secs(10);

/// `head`, then `unit` repeated to about [`SIZE`] bytes, then `tail`.
fn big(head: &str, unit: &str, tail: &str) -> Vec<u8> {
    big_of(SIZE, head, unit, tail)
}

/// `head`, then `unit` repeated to about `size` bytes, then `tail`.
fn big_of(size: usize, head: &str, unit: &str, tail: &str) -> Vec<u8> {
    let mut out = String::with_capacity(size + head.len() + tail.len() + unit.len());
    out.push_str(head);
    while out.len() < size {
        out.push_str(unit);
    }
    out.push_str(tail);
    out.into_bytes()
}

/// A structured-attrs `.drv` whose `__json` holds `"big":` `value_head` `unit`… `value_tail`
/// (JSON as the ATerm writes it: each `"` of the JSON escaped), then the features.
fn structured_drv(value_head: &str, unit: &str, value_tail: &str, features: &str) -> Vec<u8> {
    big(
        &format!(
            r#"Derive([("out","/nix/store/x-big","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{{\"big\":{value_head}"#
        ),
        unit,
        &format!(
            r#"{value_tail},\"cudaSandboxGpus\":2,\"requiredSystemFeatures\":[\"{features}\"]}}"),("out","/nix/store/x-big")])"#
        ),
    )
}

/// What the hook decides on of a derivation given as JSON.
fn json_attrs(json: &[u8]) -> Result<DrvAttrs<'static>, DrvError> {
    JsonDerivation::parse(json)?.attrs()
}

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    assert!(
        took < BOUND,
        "{what}: {took:?} for 8 MiB (linear code takes well under 1 s)"
    );
    out
}

#[test]
fn structured_attrs_with_long_escape_free_runs_parse_in_linear_time() {
    // 2^22 small array values, and one 8 MiB string without an escape: no `\` for 8 MiB.
    for (name, drv) in [
        (
            "array of small values",
            structured_drv("[", "0,", "0]", "cuda"),
        ),
        (
            "escape-free string",
            structured_drv(r#"\""#, "abcdefgh", r#"\""#, "cuda"),
        ),
    ] {
        let DrvAttrs { features, gpus } =
            timed(name, || DrvEnv::parse(&drv).unwrap().attrs().unwrap());
        assert_eq!(features.lossy(), ["cuda"], "{name}");
        assert!(features.structured);
        assert_eq!(gpus.as_deref(), Some("2"), "{name}");
    }
}

#[test]
fn json_derivations_parse_in_linear_time() {
    for (name, json) in [
        (
            "env value",
            big(
                r#"{"env":{"big":""#,
                "abcdefgh",
                r#"","requiredSystemFeatures":"cuda"}}"#,
            ),
        ),
        (
            "array",
            big(
                r#"{"/nix/store/x.drv":{"args":["#,
                "0,",
                r#"0],"env":{"requiredSystemFeatures":"kvm cuda","cudaSandboxGpus":"1"}}}"#,
            ),
        ),
        (
            "__json in env",
            big(
                r#"{"env":{"__json":"{\"big\":["#,
                "0,",
                r#"0],\"requiredSystemFeatures\":[\"cuda\"]}"}}"#,
            ),
        ),
    ] {
        let attrs = timed(name, || json_attrs(&json).unwrap());
        assert!(
            attrs.features.contains(b"cuda"),
            "{name}: {:?}",
            attrs.features.lossy()
        );
    }
}

/// A key repeated a million times, in each form: found in one pass, kept once (the readers
/// hold the deciding keys' first values only), and refused.
#[test]
fn repeated_keys_are_refused_in_linear_time() {
    let aterm = |unit: &str| {
        big(
            r#"Derive([("out","/nix/store/x-big","","")],[],[],"x86_64-linux","/bin/sh",[],["#,
            unit,
            r#"("out","/nix/store/x-big")])"#,
        )
    };
    for (name, drv) in [
        ("env key", aterm(r#"("requiredSystemFeatures","cuda"),"#)),
        (
            "escaped env key",
            aterm(r#"("re\quiredSystemFeatures","cuda"),"#),
        ),
        ("other env key", aterm(r#"("x","cuda"),"#)),
        (
            "__json member",
            structured_drv(
                r#"0,\"cudaSandboxGpus\":"#,
                r#"1,\"cudaSandboxGpus\":"#,
                "1",
                "cuda",
            ),
        ),
    ] {
        let result = timed(name, || DrvEnv::parse(&drv).unwrap().attrs());
        match name {
            "other env key" => assert!(result.unwrap().features.features.is_empty()),
            _ => assert!(
                matches!(result, Err(DrvError::Repeated { .. })),
                "{name}: {result:?}"
            ),
        }
    }
    for (name, json) in [
        (
            "env member",
            big(
                r#"{"env":{"#,
                r#""requiredSystemFeatures":"cuda","#,
                r#""x":""}}"#,
            ),
        ),
        (
            "structuredAttrs member",
            big(
                r#"{"structuredAttrs":{"#,
                r#""cudaSandboxGpus":1,"#,
                r#""requiredSystemFeatures":["cuda"]}}"#,
            ),
        ),
        (
            ".drv path",
            big(
                r#"{"#,
                r#""/nix/store/a.drv":{"env":{"x":""}},"#,
                r#""/nix/store/a.drv":{"env":{"requiredSystemFeatures":"cuda"}}}"#,
            ),
        ),
    ] {
        let result = timed(name, || json_attrs(&json));
        match name {
            ".drv path" => assert_eq!(result.unwrap().features.lossy(), ["cuda"]),
            _ => assert!(
                matches!(result, Err(DrvError::Repeated { .. })),
                "{name}: {result:?}"
            ),
        }
    }
}

#[test]
fn the_hook_reads_a_big_untagged_structured_drv_in_linear_time() {
    // What nix-build met on f51a825: 50 s of hook for a 2 MB derivation.
    let dir = tempfile::tempdir().unwrap();
    let drv = dir.path().join("big.drv");
    std::fs::write(&drv, structured_drv("[", "0,", "0]", "big-parallel")).unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[[rule]]\nname = \"n\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia0\"\n",
    )
    .unwrap();
    let out = timed("the hook", || {
        Command::new(HOOK)
            .arg(&drv)
            .arg(dir.path().join("chroot"))
            .env("CUDA_SANDBOX_CONFIG", &config)
            .output()
            .unwrap()
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

/// The peak RSS of the biggest child this process has waited for, in MiB.
fn children_peak_mib() -> f64 {
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).unwrap();
    usage.max_rss() as f64 / 1024.0
}

#[test]
fn a_json_derivation_on_drv_aterm_fd_costs_memory_near_its_size() {
    // f51a825 built a full serde_json::Value twice: 720 MB of RSS for a 60 MB derivation.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("drv.json");
    let text = big_of(
        48 << 20,
        r#"{"env":{"requiredSystemFeatures":"kvm"},"args":["#,
        r#"[1,2,{"a":"b"}],"#,
        r#"[]]}"#,
    );
    std::fs::write(&json, &text).unwrap();
    let mib = text.len() as f64 / (1 << 20) as f64;
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[[rule]]\nname = \"n\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia0\"\n",
    )
    .unwrap();
    drop(text);
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"exec 3<"$1"; DRV_ATERM_FD=3 exec "$0" "$2" "$3""#)
        .arg(HOOK)
        .arg(&json)
        .arg(dir.path().join("absent.drv"))
        .arg(dir.path().join("chroot"))
        .env("CUDA_SANDBOX_CONFIG", &config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peak = children_peak_mib();
    assert!(
        peak < 3.0 * mib,
        "peak RSS {peak:.0} MiB for a {mib:.0} MiB JSON derivation"
    );
}

// DRV_ATERM_FD: what it may name, read in this process (the descriptors are this test's).

const QUICK: FdLimits = FdLimits {
    max_bytes: 1 << 20,
    pipe_wait: Duration::from_millis(300),
};

const DRV: &[u8] = br#"Derive([("out","/nix/store/x","","")],[],[],"x86_64-linux","/bin/sh",[],[("requiredSystemFeatures","cuda")])"#;

#[test]
fn drv_aterm_fd_refuses_the_hooks_own_descriptors_and_devices() {
    for fd in ["0", "1", "2"] {
        let e = read_aterm_fd(fd, &ATERM_FD_LIMITS).unwrap_err();
        assert!(
            matches!(e, AtermFdError::StandardStream(n) if n.to_string() == fd),
            "{fd}: {e}"
        );
    }
    // /dev/zero never ends; a terminal would block: neither is opened, let alone read.
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let e = read_aterm_fd(&zero.as_raw_fd().to_string(), &ATERM_FD_LIMITS).unwrap_err();
    assert!(
        matches!(e, AtermFdError::WrongKind(k) if k.starts_with("a character device")),
        "{e}"
    );
    let dir = std::fs::File::open("/").unwrap();
    let e = read_aterm_fd(&dir.as_raw_fd().to_string(), &ATERM_FD_LIMITS).unwrap_err();
    assert!(matches!(e, AtermFdError::WrongKind("a directory")), "{e}");
    for bad in ["", "x", "-3", "99999999999"] {
        assert!(
            matches!(
                read_aterm_fd(bad, &ATERM_FD_LIMITS),
                Err(AtermFdError::NotANumber)
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn drv_aterm_fd_reads_files_and_memfds_from_their_start_up_to_the_cap() {
    use std::io::{Seek, Write};
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(DRV).unwrap();
    // The handed-over offset is at the end: the fresh open reads from the start.
    let fd = file.as_raw_fd().to_string();
    assert_eq!(read_aterm_fd(&fd, &QUICK).unwrap(), DRV);

    let memfd =
        nix::sys::memfd::memfd_create(c"drv", nix::sys::memfd::MemFdCreateFlag::empty()).unwrap();
    let mut memfd = std::fs::File::from(memfd);
    memfd.write_all(DRV).unwrap();
    memfd.rewind().unwrap();
    assert_eq!(
        read_aterm_fd(&memfd.as_raw_fd().to_string(), &QUICK).unwrap(),
        DRV
    );

    // Over the cap: refused from its size, unread (a sparse file of 1 TiB reads nothing).
    let huge = tempfile::tempfile().unwrap();
    huge.set_len(1 << 40).unwrap();
    let start = Instant::now();
    let e = read_aterm_fd(&huge.as_raw_fd().to_string(), &ATERM_FD_LIMITS).unwrap_err();
    assert!(matches!(e, AtermFdError::TooBig { .. }), "{e}");
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn drv_aterm_fd_pipes_are_read_to_their_end_and_never_block_past_the_bound() {
    use std::io::Write;
    // A pipe whose writer wrote everything and closed it: read whole.
    let (read, write) = nix::unistd::pipe().unwrap();
    let mut writer = std::fs::File::from(write);
    writer.write_all(DRV).unwrap();
    drop(writer);
    assert_eq!(
        read_aterm_fd(&read.as_raw_fd().to_string(), &QUICK).unwrap(),
        DRV
    );

    // A writer that keeps the pipe open and never writes (or writes part and stalls): the
    // read gives up after the bound instead of hanging the build.
    let (read, write) = nix::unistd::pipe().unwrap();
    let mut writer = std::fs::File::from(write);
    writer.write_all(&DRV[..10]).unwrap();
    let start = Instant::now();
    let e = read_aterm_fd(&read.as_raw_fd().to_string(), &QUICK).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, AtermFdError::PipeStalled { .. }), "{e}");
    assert!(
        took >= QUICK.pipe_wait / 2 && took < QUICK.pipe_wait * 10,
        "{took:?}"
    );

    // A writer that never stops: the cap ends the read (a thread writes 2 MiB against 1 MiB).
    let (read, write) = nix::unistd::pipe().unwrap();
    let feeder = std::thread::spawn(move || {
        let mut writer = std::fs::File::from(write);
        let chunk = vec![b'x'; 64 << 10];
        for _ in 0..32 {
            if writer.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let e = read_aterm_fd(&read.as_raw_fd().to_string(), &QUICK).unwrap_err();
    assert!(matches!(e, AtermFdError::TooBig { .. }), "{e}");
    drop(read);
    feeder.join().unwrap();
}

/// The hook itself, with `DRV_ATERM_FD` naming descriptors a shell sets up: none of these may
/// hang it, and each falls back to the `missing_drv` policy ("fail" here) saying why.
#[test]
fn the_hook_never_hangs_on_what_drv_aterm_fd_names() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = d.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "missing_drv = \"fail\"\nruntime_dir = \"{}\"\n[[rule]]\nname = \"n\"\nfeatures = [\"cuda\"]\n[[rule.device]]\nglob = \"/dev/nvidia0\"\n",
            d.join("run").display()
        ),
    )
    .unwrap();
    let fifo = d.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // Each script ends by exec'ing the hook with DRV_ATERM_FD set.
    for (name, script) in [
        // A FIFO whose writer (a background sleep) holds it open and never writes.
        (
            "held FIFO",
            r#"sleep 60 > "$4" 2>/dev/null & exec 3< "$4"; DRV_ATERM_FD=3 "$0" "$1" "$2"; s=$?; kill $!; exit $s"#,
        ),
        // Its own stdout: a pipe to the test, which reads it to the end.
        ("stdout", r#"DRV_ATERM_FD=1 exec "$0" "$1" "$2""#),
        (
            "/dev/zero",
            r#"exec 3< /dev/zero; DRV_ATERM_FD=3 exec "$0" "$1" "$2""#,
        ),
    ] {
        let start = Instant::now();
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(HOOK)
            .arg(d.join("absent.drv"))
            .arg(d.join("chroot"))
            .arg(&config)
            .arg(&fifo)
            .env("CUDA_SANDBOX_CONFIG", &config)
            .output()
            .unwrap();
        let took = start.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(
            err.contains("DRV_ATERM_FD=") && err.contains("missing_drv"),
            "{name}: {err}"
        );
        assert!(
            took < ATERM_FD_LIMITS.pipe_wait + Duration::from_secs(10),
            "{name}: {took:?}"
        );
    }
}

// CDI specs in YAML: no anchor or alias is replayed, and the events read are capped.

/// What a child run of the hook cost.
struct Run {
    /// Its exit status (`None`: killed by a signal).
    code: Option<i32>,
    /// Its stdout.
    stdout: String,
    /// Its wall time.
    took: Duration,
    /// Its peak RSS, in MiB, from `wait4(2)`.
    peak_mib: f64,
}

/// `explain --json --features cuda --config CONFIG` as a child with at most 1 GiB of address
/// space (`ulimit -v`, so a run that amplifies fails fast instead of taking the machine's
/// memory), killed after `limit`. Returns what it cost.
fn explain_capped(config: &std::path::Path, stdout: &std::path::Path, limit: Duration) -> Run {
    let start = Instant::now();
    // Reaped below with wait4(2), which also gives its peak RSS.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new("sh")
        .args(["-c", "ulimit -v 1048576; exec \"$@\"", "sh", HOOK])
        .args(["explain", "--json", "--features", "cuda", "--config"])
        .arg(config)
        .stdout(std::fs::File::create(stdout).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: our own unwaited child; both out-pointers are valid.
        let got = unsafe { nix::libc::wait4(pid, &mut status, nix::libc::WNOHANG, &mut usage) };
        assert!(got >= 0, "wait4: {}", std::io::Error::last_os_error());
        if got == pid {
            break;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            // SAFETY: as above.
            unsafe { nix::libc::wait4(pid, &mut status, 0, &mut usage) };
            panic!("explain ran past {limit:?} on the spec (killed)");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let code = nix::libc::WIFEXITED(status).then(|| nix::libc::WEXITSTATUS(status));
    Run {
        code,
        stdout: std::fs::read_to_string(stdout).unwrap(),
        took: start.elapsed(),
        peak_mib: usage.ru_maxrss as f64 / 1024.0,
    }
}

/// A spec directory holding `spec.yaml` with `text`, and a config whose one rule names
/// `nvidia.com/gpu=all` from it. Returns the config and the spec's path.
fn yaml_spec_host(dir: &std::path::Path, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let specs = dir.join("cdi");
    std::fs::create_dir(&specs).unwrap();
    let spec = specs.join("spec.yaml");
    std::fs::write(&spec, text).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "runtime_dir = \"{}\"\nclosure_cache = \"{}\"\ncdi_spec_dirs = [\"{}\"]\n\
             [[rule]]\nname = \"r\"\nfeatures = [\"cuda\"]\ncdi = [\"nvidia.com/gpu=all\"]\n",
            dir.join("run").display(),
            dir.join("cache").display(),
            specs.display()
        ),
    )
    .unwrap();
    (config, spec)
}

#[test]
fn a_yaml_spec_of_one_anchor_aliased_many_times_is_refused_at_once() {
    // serde_norway's alias limit counts jumps, not the events they replay: this 200 KB spec
    // (a 100 KB list anchored once, then aliased as the arguments of 2,500 hooks) made the
    // hook replay about 60 million strings; a root `explain` ran past 100 s at 12.8 GiB.
    let dir = tempfile::tempdir().unwrap();
    let mut text =
        String::from("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  env: &a [");
    while text.len() < 100 << 10 {
        text.push_str("\"x\", ");
    }
    text.push_str("\"x\"]\ndevices:\n- name: all\n  containerEdits:\n    hooks:\n");
    while text.len() < 200 << 10 {
        text.push_str("    - {hookName: createContainer, path: /bin/true, args: *a}\n");
    }
    let (config, spec) = yaml_spec_host(dir.path(), &text);
    let run = explain_capped(
        &config,
        &dir.path().join("out.json"),
        Duration::from_secs(20),
    );
    eprintln!(
        "{} KiB spec: explain took {:?}, peak RSS {:.1} MiB",
        text.len() >> 10,
        run.took,
        run.peak_mib
    );
    assert_eq!(run.code, Some(0), "explain did not finish: {}", run.stdout);
    let e: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let skipped = e["plan"]["skipped"].to_string();
    assert!(
        skipped.contains(&spec.display().to_string()) && skipped.contains("anchor"),
        "the spec was not refused for its anchor: {e:#}"
    );
    assert!(run.took < Duration::from_secs(1), "{:?}", run.took);
    assert!(run.peak_mib < 64.0, "peak RSS {:.1} MiB", run.peak_mib);
}

#[test]
fn a_yaml_spec_of_more_events_than_any_spec_has_is_refused_in_bounded_memory() {
    // No anchor, but 1.5 million events (3 MiB of one-letter list items): refused at the cap,
    // before a deserialiser holds them all.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from(
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\ncontainerEdits:\n  env: [",
    );
    while text.len() < 3 << 20 {
        text.push_str("x,");
    }
    text.push_str("x]\n");
    let (config, spec) = yaml_spec_host(dir.path(), &text);
    let run = explain_capped(
        &config,
        &dir.path().join("out.json"),
        Duration::from_secs(20),
    );
    eprintln!(
        "{} KiB spec: explain took {:?}, peak RSS {:.1} MiB",
        text.len() >> 10,
        run.took,
        run.peak_mib
    );
    assert_eq!(run.code, Some(0), "explain did not finish: {}", run.stdout);
    let skipped = run.stdout.clone();
    assert!(
        skipped.contains(&spec.display().to_string()) && skipped.contains("events"),
        "the spec was not refused at the event cap: {skipped}"
    );
    assert!(run.took < BOUND, "{:?}", run.took);
    // The text itself (read whole, 3 MiB) and the hook: the events are never all held.
    assert!(run.peak_mib < 64.0, "peak RSS {:.1} MiB", run.peak_mib);
}

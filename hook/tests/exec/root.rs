//! The root tier of these tests (docs/testing.md).

use super::*;

#[test]
fn runner_passes_inside_exec_with_the_fake_driver() {
    if !root_available("runner_passes_inside_exec_with_the_fake_driver") {
        return;
    }
    let host = Host::new();
    let runner = workspace_binary("cuda-sandbox-check");
    let report = host.dir.path().join("out/report.json");
    let out = host.exec(&[
        runner.to_str().unwrap(),
        "--saxpy-elements",
        "65536",
        "--report",
        report.to_str().unwrap(),
    ]);
    let t = text(&out);
    assert!(out.status.success(), "runner failed inside exec:\n{t}");
    // The report came out through --bind; its verdicts, not the (interleaved) console.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    for check in [
        "devices::nodes",
        "driver::library",
        "driver::version",
        "kernel::saxpy",
    ] {
        assert_eq!(report["checks"][check]["verdict"], "pass", "{check}:\n{t}");
    }
    assert_eq!(
        report["checks"]["driver::library"]["facts"]["path"],
        "/run/opengl-driver/lib/libcuda.so.1"
    );
}

#[test]
fn paths_the_hook_did_not_expose_are_absent_inside_exec() {
    if !root_available("paths_the_hook_did_not_expose_are_absent_inside_exec") {
        return;
    }
    let host = Host::new();
    let script = r#"
        for p in /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm; do [ -c "$p" ] && echo "char $p"; done
        for p in /dev/nvidia1 /etc/shadow /usr/bin /home /root /run/opengl-driver/lib/fake-driver.conf.missing; do
          [ -e "$p" ] && echo "PRESENT $p"
        done
        [ -f /run/cuda-sandbox/manifest.json ] && echo "manifest"
        [ -f /run/opengl-driver/lib/libcuda.so.1 ] && echo "libcuda"
        echo end
    "#;
    let t = host.run_script(
        script,
        &[
            "char /dev/nvidia0",
            "char /dev/nvidiactl",
            "char /dev/nvidia-uvm",
            "manifest",
            "libcuda",
            "end",
        ],
    );
    assert!(!t.contains("PRESENT"), "unexposed paths visible:\n{t}");
    // The host itself still has the second GPU: exec hid it.
    assert!(host.dir.path().join("root/dev/nvidia1").exists());
}

#[test]
fn exec_refuses_what_the_hook_would_refuse() {
    if !root_available("exec_refuses_what_the_hook_would_refuse") {
        return;
    }
    let host = Host::new();
    std::fs::remove_file(host.dir.path().join("root/dev/nvidia-uvm")).unwrap();
    let out = host.exec(&["/bin/true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("would refuse") && t.contains("/dev/nvidia-uvm"),
        "{t}"
    );
}

#[test]
fn exec_runs_isolated_like_a_build() {
    // The command ran as root with the host's PID namespace and /proc, so
    // /proc/1/root reached the host.
    if !root_available("exec_runs_isolated_like_a_build") {
        return;
    }
    let host = Host::new();
    let script = r#"
        while read -r key value rest; do
          case $key in Uid:|NoNewPrivs:) echo "$key $value";; esac
        done < /proc/self/status
        n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo "processes $n"
        echo "pid $$"
        [ -e /proc/1/root/etc/shadow ] && echo "HOST REACHED"
        if (: > /run/opengl-driver/lib/planted) 2>/dev/null; then echo "WROTE"; else echo "read-only"; fi
        if (: > /build/mine) 2>/dev/null; then echo "build writable"; fi
        echo end
    "#;
    let t = host.run_script(
        script,
        &[
            "Uid: 65534",
            "NoNewPrivs: 1",
            "processes 1",
            "pid 1",
            "read-only",
            "build writable",
            "end",
        ],
    );
    assert!(!t.contains("HOST REACHED") && !t.contains("WROTE"), "{t}");
    // The exit status comes through.
    let out = host.exec(&["/bin/sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
}

#[test]
fn the_command_cannot_type_into_the_terminal_exec_was_started_from() {
    // The command kept exec's terminal as its controlling tty, and as
    // nobody pushed `id > FILE` into root's shell with TIOCSTI.
    if !root_available("the_command_cannot_type_into_the_terminal_exec_was_started_from") {
        return;
    }
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map(|s| s.trim() == "1")
        .unwrap_or(true);
    let host = Host::new();
    let probe = compile(host.dir.path(), "tty-probe", TTY_PROBE, &[]);
    let injected = "echo INJECTED-BY-THE-COMMAND\n";
    // The harness sees an injection: the probe run straight on the pty types into it (as
    // root, TIOCSTI works on one's controlling terminal whatever legacy_tiocsti says).
    let control = run_on_a_fresh_terminal(&mut Command::new(&probe), Duration::from_secs(60));
    assert!(
        control.output.contains("TIOCSTI stdin: TYPED") && control.typed.contains(injected),
        "the control run did not type into its terminal: {control:?}"
    );
    let t = run_on_a_fresh_terminal(
        &mut host.exec_command(&[probe.to_str().unwrap()]),
        Duration::from_secs(60),
    );
    assert!(t.status.is_some_and(|s| s.success()), "exec failed: {t:?}");
    let out = &t.output;
    assert!(
        out.contains("tty_nr 0"),
        "the command has a controlling tty: {t:?}"
    );
    assert!(
        out.contains("isatty 0 0 0"),
        "the command holds a terminal: {t:?}"
    );
    assert!(
        out.contains("/dev/tty: No such device or address"),
        "/dev/tty opened: {t:?}"
    );
    assert!(out.contains("TIOCSTI stdin: refused"), "{t:?}");
    assert!(
        !out.contains("TYPED") && t.typed.is_empty(),
        "the command typed into exec's terminal (legacy_tiocsti {legacy}): {t:?}"
    );
}

#[test]
fn a_program_whose_section_headers_lie_gets_no_private_host_file() {
    // The dependencies came from the section headers, which the loader
    // ignores: a program listing a file of a 0700 home got it bound and read it as nobody.
    if !root_available("a_program_whose_section_headers_lie_gets_no_private_host_file") {
        return;
    }
    let host = Host::new();
    let home = host.dir.path().join("home/victim");
    std::fs::create_dir_all(&home).unwrap();
    let private = home.join("private.txt");
    std::fs::write(&private, "SECRET-OF-THE-VICTIM\n").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&home, Some(4242), Some(4242)).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let reader = compile(
        host.dir.path(),
        "reader",
        r#"
        #include <errno.h>
        #include <stdio.h>
        #include <string.h>
        int main(int argc, char **argv) {
            FILE *f = fopen(argv[1], "r");
            char text[256] = {0};
            if (!f) { printf("cannot open %s: %s\n", argv[1], strerror(errno)); return 0; }
            fread(text, 1, sizeof text - 1, f);
            printf("read: %s", text);
            return 0;
        }
        "#,
        &[],
    );
    cuda_sandbox_testkit::crafted_elf::lie_about_dependencies(
        &reader,
        &[private.to_str().unwrap(), "libc.so.6"],
        Some(home.to_str().unwrap()),
    )
    .unwrap();
    let out = host.exec(&[reader.to_str().unwrap(), private.to_str().unwrap()]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("cannot open"), "{t}");
    assert!(
        !t.contains("SECRET-OF-THE-VICTIM"),
        "the private file was bound:\n{t}"
    );
}

#[test]
fn fifos_and_devices_named_as_libraries_are_never_opened() {
    // Every named "library" was read to its end as root: /dev/zero
    // without end, and a FIFO hung exec.
    if !root_available("fifos_and_devices_named_as_libraries_are_never_opened") {
        return;
    }
    let host = Host::new();
    let d = host.dir.path();
    let fifo = d.join("libfifo.so");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let fifo = fifo.to_str().unwrap();
    // DT_NEEDED holds a library's soname: stubs named after the FIFO and /dev/zero.
    for (stub, soname) in [
        ("libnamed-fifo.so", fifo),
        ("libnamed-zero.so", "/dev/zero"),
    ] {
        let path = d.join(stub);
        cuda_sandbox_testkit::shared_library(&path, Some(soname)).unwrap();
    }
    let main = "int main(void) { return 0; }\n";
    let fifo_stub = d.join("libnamed-fifo.so");
    let zero_stub = d.join("libnamed-zero.so");
    let programs = [
        // The FIFO first: the old code blocked there, before reading /dev/zero without end.
        compile(
            d,
            "needs",
            main,
            &[
                "-Wl,--no-as-needed",
                fifo_stub.to_str().unwrap(),
                zero_stub.to_str().unwrap(),
            ],
        ),
        compile(
            d,
            "interp-fifo",
            main,
            &[&format!("-Wl,--dynamic-linker={fifo}")],
        ),
        compile(d, "interp-zero", main, &["-Wl,--dynamic-linker=/dev/zero"]),
    ];
    let needs = cuda_sandbox_elfkit::dynamic_info(&std::fs::read(&programs[0]).unwrap())
        .unwrap()
        .unwrap()
        .needed;
    assert_eq!(needs[..2], [fifo, "/dev/zero"], "{needs:?}");
    for program in &programs {
        // Memory capped too: the old code read /dev/zero until it ran out.
        let exec = host.exec_command(&[program.to_str().unwrap()]);
        let mut capped = Command::new("sh");
        capped
            .args(["-c", "ulimit -v 4194304; exec \"$@\"", "sh"])
            .arg(exec.get_program())
            .args(exec.get_args());
        let out = output_within(capped, 60)
            .unwrap_or_else(|| panic!("exec hung on {}", program.display()));
        let t = text(&out);
        let refused = if program.ends_with("interp-zero") {
            vec!["/dev/zero"]
        } else if program.ends_with("interp-fifo") {
            vec![fifo]
        } else {
            vec![fifo, "/dev/zero"]
        };
        for path in refused {
            let kind = if path == fifo { "a FIFO" } else { "a device" };
            assert!(
                t.contains(&format!("not binding {path} (named by"))
                    && t.contains(&format!("it is {kind}, not a regular file")),
                "{}: {path} not refused as {kind}:\n{t}",
                program.display()
            );
        }
        assert!(
            out.status.code().is_some(),
            "{}: exec killed:\n{t}",
            program.display()
        );
    }
}

#[test]
fn the_command_gets_a_clean_environment_and_no_inherited_descriptor() {
    // The command inherited root's whole environment (a secret token was
    // printed) and root's open descriptors.
    if !root_available("the_command_gets_a_clean_environment_and_no_inherited_descriptor") {
        return;
    }
    let host = Host::new();
    let secret = host.dir.path().join("secret");
    std::fs::write(&secret, "SECRET-OF-FD-7\n").unwrap();
    let script = r#"
        export -p
        [ -e /proc/self/fd/7 ] && echo "FD 7 OPEN"
        (read -r line <&7 && echo "fd 7 reads: $line") 2>/dev/null
        for fd in /proc/self/fd/*; do echo "fd ${fd##*/}"; done
        echo end
    "#;
    let exec = host.exec_command_with(
        &[
            "--env",
            "PASSED_THROUGH",
            "--env",
            "SET_HERE=chosen value",
            "--env",
            "NOT_SET_ANYWHERE",
        ],
        &["/bin/sh", "-c", script],
    );
    // The hook gets fd 7 open on the secret, as a root shell's `exec 7<FILE` leaves it.
    let out = Command::new("sh")
        .args(["-c", "exec 7<\"$1\"; shift; exec \"$@\"", "sh"])
        .arg(&secret)
        .arg(exec.get_program())
        .args(exec.get_args())
        .env("SECRET_TOKEN", "hunter2")
        .env("PASSED_THROUGH", "from the caller")
        .env_remove("NOT_SET_ANYWHERE")
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.lines().any(|l| l == "end"), "{t}");
    assert!(!t.contains("hunter2") && !t.contains("SECRET_TOKEN"), "{t}");
    assert!(
        !t.contains("FD 7 OPEN") && !t.contains("SECRET-OF-FD-7"),
        "{t}"
    );
    // 0, 1, 2 and the directory the shell is listing: nothing else.
    let fds: Vec<&str> = t.lines().filter_map(|l| l.strip_prefix("fd ")).collect();
    assert_eq!(fds, ["0", "1", "2", "3"], "{t}");
    let names: std::collections::BTreeSet<&str> = t
        .lines()
        .filter_map(|l| {
            l.strip_prefix("export ")
                .or_else(|| l.strip_prefix("declare -x "))
        })
        .map(|l| l.split('=').next().unwrap())
        .collect();
    let mut expected: std::collections::BTreeSet<&str> = cuda_sandbox_hook::exec::BASE_ENVIRONMENT
        .iter()
        .map(|(n, _)| *n)
        .collect();
    expected.extend(["NIX_STORE", "LD_LIBRARY_PATH", "PASSED_THROUGH", "SET_HERE"]);
    assert_eq!(names, expected, "{t}");
    for line in [
        "export PASSED_THROUGH='from the caller'",
        "export SET_HERE='chosen value'",
        "export HOME='/homeless-shelter'",
        "export PATH='/path-not-set'",
    ] {
        assert!(t.lines().any(|l| l == line), "{line:?} missing:\n{t}");
    }
}

#[test]
fn exec_stages_its_root_in_a_directory_only_root_can_enter() {
    // The host-side directory exec mounts its root on was 0755.
    if !root_available("exec_stages_its_root_in_a_directory_only_root_can_enter") {
        return;
    }
    let host = Host::new();
    let staging = host.dir.path().join("run/exec-root");
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755)).unwrap();
    host.run_script("echo end", &["end"]);
    let mode = std::fs::metadata(&staging).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "{mode:o}");
}

#[test]
fn exec_and_package_driver_agree_on_which_libcuda_each_program_gets() {
    // Both ask elfkit::ldso: exec to bind a command's libraries, package::driver (run inside
    // exec, where both look at the same root) to say which libcuda.so.1 an object gets.
    if !root_available("exec_and_package_driver_agree_on_which_libcuda_each_program_gets") {
        return;
    }
    let host = Host::new();
    let corpus = host.dir.path().join("corpus");
    let stub = corpus.join("stub");
    std::fs::create_dir_all(&stub).unwrap();
    // A --bind path is one the command's user may write.
    std::os::unix::fs::chown(&corpus, Some(65534), Some(65534)).unwrap();
    cuda_sandbox_testkit::shared_library(&stub.join("libcuda.so.1"), Some("libcuda.so.1")).unwrap();
    let main = "int cuInit(unsigned int); int main(void) { return cuInit(0); }\n";
    let loader = cuda_sandbox_elfkit::ldso::Loader::debian("/lib64/ld-linux-x86-64.so.2".into());
    let platform = loader.platform.clone().unwrap();
    // (name, link flags, where its own libcuda.so.1 is, what it gets)
    let driver = PathBuf::from("/run/opengl-driver/lib/libcuda.so.1");
    let cases: Vec<(&str, String, String, PathBuf)> = vec![
        // DT_RUNPATH comes after LD_LIBRARY_PATH: the driver exec exposes.
        (
            "runpath",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib".into(),
            "lib".into(),
            driver.clone(),
        ),
        // DT_RPATH comes before it: the package's own copy.
        (
            "rpath",
            "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../lib".into(),
            "lib".into(),
            corpus.join("rpath/bin/../lib/libcuda.so.1"),
        ),
        // $LIB and $PLATFORM, as Debian's loader has them on this CPU.
        (
            "platform",
            "-Wl,--disable-new-dtags,-rpath,$ORIGIN/../$LIB/$PLATFORM".into(),
            format!("{}/{platform}", loader.lib),
            corpus.join(format!(
                "platform/bin/../{}/{platform}/libcuda.so.1",
                loader.lib
            )),
        ),
    ];
    let mut programs = Vec::new();
    for (name, flags, lib_dir, want) in &cases {
        let dir = corpus.join(name);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let own = dir.join(lib_dir).join("libcuda.so.1");
        std::fs::create_dir_all(own.parent().unwrap()).unwrap();
        cuda_sandbox_testkit::shared_library(&own, Some("libcuda.so.1")).unwrap();
        let link = format!("-L{}", stub.display());
        let program = compile(
            &dir.join("bin"),
            "prog",
            main,
            &[&link, "-l:libcuda.so.1", flags],
        );
        assert_eq!(
            exec_libcuda(&host, &program, &corpus).as_ref(),
            Some(want),
            "exec: {name}"
        );
        programs.push((program, want.clone()));
    }
    std::fs::remove_dir_all(&stub).unwrap();
    let runner = workspace_binary("cuda-sandbox-check");
    let report = host.dir.path().join("out/report.json");
    let corpus_arg = corpus.to_str().unwrap();
    let out = host
        .exec_command_with(
            &["--bind", corpus_arg],
            &[
                runner.to_str().unwrap(),
                "--no-manifest",
                "--package",
                corpus_arg,
                "--report",
                report.to_str().unwrap(),
                "package::driver",
            ],
        )
        .output()
        .unwrap();
    let t = text(&out);
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("no report ({e}):\n{t}")),
    )
    .unwrap();
    let objects = report["checks"]["package::driver"]["facts"]["objects"]
        .as_array()
        .unwrap_or_else(|| panic!("no objects:\n{t}"));
    for (program, want) in &programs {
        let judged = objects
            .iter()
            .find(|o| o["object"] == program.to_str().unwrap())
            .unwrap_or_else(|| panic!("{} not judged:\n{t}", program.display()));
        assert_eq!(
            judged["gets"],
            want.to_str().unwrap(),
            "package::driver:\n{t}"
        );
    }
}

#[test]
fn a_bind_path_through_a_symlink_nobody_planted_is_refused() {
    // Run by root, `exec --bind /tmp/out/link` followed nobody's link and bound a file of a
    // root-only directory, read-write, where the command (as nobody) read it.
    if !root_available("a_bind_path_through_a_symlink_nobody_planted_is_refused") {
        return;
    }
    let host = Host::new();
    let d = host.dir.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let private = d.join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(private.join("secret"), "ROOT-ONLY-SECRET\n").unwrap();
    std::fs::set_permissions(
        private.join("secret"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let drop = d.join("drop");
    std::fs::create_dir(&drop).unwrap();
    std::os::unix::fs::chown(&drop, Some(65534), Some(65534)).unwrap();
    link_as_nobody(&private.join("secret"), &drop.join("link"));
    link_as_nobody(&private, &drop.join("dir"));
    for (bound, link) in [
        (drop.join("link"), drop.join("link")),
        (drop.join("dir/secret"), drop.join("dir")),
    ] {
        let out = host
            .exec_command_with(
                &["--bind", bound.to_str().unwrap()],
                &[
                    "/bin/sh",
                    "-c",
                    "read -r line < \"$0\"; echo \"read: $line\"; echo end",
                    bound.to_str().unwrap(),
                ],
            )
            .output()
            .unwrap();
        let t = text(&out);
        assert!(
            !t.contains("ROOT-ONLY-SECRET"),
            "the link was followed:\n{t}"
        );
        assert_eq!(out.status.code(), Some(2), "{t}");
        assert_eq!(t.lines().count(), 1, "{t}");
        assert!(
            t.contains(&format!("--bind {}", bound.display()))
                && t.contains(&format!("{} is a symlink", link.display())),
            "{t}"
        );
    }
}

#[test]
fn a_bind_path_the_command_cannot_write_is_refused() {
    // `--help` says the command's user must be able to write a --bind path; nothing checked.
    if !root_available("a_bind_path_the_command_cannot_write_is_refused") {
        return;
    }
    let host = Host::new();
    let d = host.dir.path();
    let roots = d.join("roots");
    std::fs::create_dir(&roots).unwrap();
    std::fs::set_permissions(&roots, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = host
        .exec_command_with(&["--bind", roots.to_str().unwrap()], &["/bin/true"])
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert_eq!(t.lines().count(), 1, "{t}");
    assert!(
        t.contains("cannot write it") && t.contains("uid 65534") && t.contains("--user"),
        "{t}"
    );
    // As root, or for a group-writable one as a user of its group, the command may.
    std::os::unix::fs::chown(&roots, Some(0), Some(4242)).unwrap();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (user, mode) in [("0", 0o755), ("4242:4242", 0o775)] {
        std::fs::set_permissions(&roots, std::fs::Permissions::from_mode(mode)).unwrap();
        let script = format!(": > {}/made && echo made", roots.display());
        let out = Command::new(HOOK)
            .args(["exec", "--features", "cuda", "--config"])
            .arg(host.config())
            .args(["--user", user, "--bind", roots.to_str().unwrap()])
            .args(["--", "/bin/sh", "-c", &script])
            .output()
            .unwrap();
        let t = text(&out);
        assert!(out.status.success() && t.contains("made"), "{user}: {t}");
        std::fs::remove_file(roots.join("made")).unwrap();
    }
}

#[test]
fn exec_runs_the_untagged_view_a_build_without_gpu_features_gets() {
    // `explain --features unrelated` showed the untagged view, while exec refused it with "no
    // usable configuration". exec now runs it: a build's sandbox with nothing of the hook's,
    // where the runner's --expect-no-gpu checks what an untagged build must not see.
    if !root_available("exec_runs_the_untagged_view_a_build_without_gpu_features_gets") {
        return;
    }
    let host = Host::new();
    let runner = workspace_binary("cuda-sandbox-check");
    let exec = |command: &[&str]| {
        Command::new(HOOK)
            .args(["exec", "--features", "unrelated", "--config"])
            .arg(host.config())
            .arg("--")
            .args(command)
            .output()
            .unwrap()
    };
    let out = exec(&[runner.to_str().unwrap(), "--expect-no-gpu"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("isolation::no_gpu"), "{t}");
    let out = exec(&[
        "/bin/sh",
        "-c",
        "for p in /dev/nvidia0 /dev/nvidiactl /run/opengl-driver /run/cuda-sandbox/manifest.json; do \
         [ -e \"$p\" ] && echo \"PRESENT $p\"; done; echo end",
    ]);
    let t = text(&out);
    assert!(out.status.success() && t.contains("end"), "{t}");
    assert!(!t.contains("PRESENT"), "{t}");
}

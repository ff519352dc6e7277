//! The nix_versions tier of these tests (docs/testing.md).

use super::*;

#[test]
fn the_tests_run_under_the_nix_they_were_asked_to() {
    if !nix_available("the_tests_run_under_the_nix_they_were_asked_to") {
        return;
    }
    // NixVersion::current() panics when CUDA_SANDBOX_NIX names another version.
    let v = version();
    eprintln!("Nix in use: {v}");
    if let Ok(wanted) = std::env::var("CUDA_SANDBOX_NIX") {
        assert!(v.is(&wanted), "{wanted} vs {v}");
    }
}

#[test]
fn a_build_under_this_nix_is_really_sandboxed() {
    if !nix_available("a_build_under_this_nix_is_really_sandboxed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A host file the builder must not see: it is in no sandbox path.
    let secret = dir.path().join("host-secret");
    std::fs::write(&secret, "host\n").unwrap();
    let script = format!(
        "mkdir $out\n\
         if [ -e {secret} ]; then echo visible; else echo absent; fi > $out/secret\n\
         echo $$ > $out/pid\n\
         readlink /proc/self/ns/mnt > $out/mnt\n\
         readlink /proc/self/ns/pid > $out/pidns\n\
         ls / > $out/root",
        secret = secret.display()
    );
    let file = nix_file(
        dir.path(),
        "sandboxed",
        &sh_derivation("sandboxed", &script, ""),
    );
    let build = plain_sandbox().build(&file, &[("nonce", &nonce())], &[]);
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let out = &build.out_paths[0];
    assert_eq!(
        read(&out.join("secret")),
        "absent",
        "the builder saw a host file"
    );
    // The builder is the init of a PID namespace of its own, in a mount namespace of its own.
    assert_eq!(
        read(&out.join("pid")),
        "1",
        "the builder is not PID 1 of its own namespace"
    );
    let own = |ns: &str| {
        std::fs::read_link(format!("/proc/self/ns/{ns}"))
            .unwrap()
            .display()
            .to_string()
    };
    assert_ne!(read(&out.join("mnt")), own("mnt"), "same mount namespace");
    assert_ne!(read(&out.join("pidns")), own("pid"), "same PID namespace");
    // The sandbox root holds what Nix puts there and the sandbox paths, not the host's root.
    let root = read(&out.join("root"));
    assert!(!root.lines().any(|l| l == "root" || l == "home"), "{root}");
}

#[test]
fn a_build_in_a_chroot_is_sandboxed_or_refused_never_unsandboxed() {
    if !nix_available("a_build_in_a_chroot_is_sandboxed_or_refused_never_unsandboxed") {
        return;
    }
    // Inside a chroot the kernel refuses user namespaces; Nix then falls back to no sandbox
    // unless sandbox-fallback = false (which every test config and the provisioned roots'
    // nix.conf set). The chroot: this very root bound at a directory, in a mount namespace of
    // its own, so every path is where it was.
    let dir = tempfile::tempdir().unwrap();
    let file = nix_file(
        dir.path(),
        "chrooted",
        &sh_derivation("chrooted", "echo $$ > $out", ""),
    );
    let there = dir.path().join("chroot");
    std::fs::create_dir(&there).unwrap();
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount --rbind / \"$1\" && shift && exec chroot \"$@\"")
        .arg("sh")
        .arg(&there)
        .arg(&there)
        .arg("nix-build")
        .arg(&file)
        .args(["--no-out-link", "--argstr", "nonce", &nonce()])
        .env("NIX_CONFIG", plain_sandbox().nix_config())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        // Nix 2.8 needs no user namespace as root: its sandbox (mount and PID namespaces)
        // works in a chroot too. The builder must still be PID 1 of its own namespace.
        let stdout = String::from_utf8(out.stdout).unwrap();
        let path = PathBuf::from(stdout.trim());
        assert_eq!(
            read(&path),
            "1",
            "Nix {} built unsandboxed in a chroot",
            version()
        );
        eprintln!(
            "Nix {} in a chroot: sandboxed without a user namespace",
            version()
        );
        return;
    }
    assert!(
        log.contains("sandbox") || log.contains("namespace"),
        "failed for another reason:\n{log}"
    );
    eprintln!("Nix {} in a chroot: {}", version(), log.trim());
}

#[test]
fn the_hook_gets_this_nixs_chroot_layout() {
    if !nix_available("the_hook_gets_this_nixs_chroot_layout") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = dir.path().join("hook-args");
    let hook = dir.path().join("hook");
    write_script(
        &hook,
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\n[ -d \"$2\" ] && echo dir >> {}\n",
            args.display(),
            args.display()
        ),
    )
    .unwrap();
    let file = nix_file(
        dir.path(),
        "layout",
        &sh_derivation("layout", "echo built > $out", "\"cuda\""),
    );
    let mut sandbox = plain_sandbox();
    sandbox.hook = Some(hook);
    let build = sandbox.build(&file, &[("nonce", &nonce())], &[]);
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let text = read(&args);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "the hook's arguments: {text}");
    let (drv, chroot) = (lines[0], lines[1]);
    assert!(drv.ends_with("-layout.drv"), "{text}");
    assert_eq!(
        lines[2], "dir",
        "the chroot root exists when the hook runs: {text}"
    );
    let expected = if version().chroot_is_a_root_subdirectory() {
        format!("{drv}.chroot/root")
    } else {
        format!("{drv}.chroot")
    };
    assert_eq!(chroot, expected, "Nix {}", version());
}

#[test]
fn a_symlink_in_sandbox_paths_is_copied_or_followed_as_this_nix_does() {
    if !nix_available("a_symlink_in_sandbox_paths_is_copied_or_followed_as_this_nix_does") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("file"), "through the link\n").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let script = format!(
        "mkdir $out\n\
         if [ -L {link} ]; then echo symlink; elif [ -d {link} ]; then echo directory; fi > $out/kind\n\
         cat {link}/file > $out/content 2>/dev/null || echo unreachable > $out/content",
        link = link.display()
    );
    let file = nix_file(dir.path(), "links", &sh_derivation("links", &script, ""));
    let mut sandbox = plain_sandbox();
    // Only the link, not its target (nix_config adds link targets only for the Nix's own
    // library links in sandbox_paths: list this one as an extra setting).
    sandbox
        .extra_settings
        .push(format!("extra-sandbox-paths = {}", link.display()));
    let build = sandbox.build(&file, &[("nonce", &nonce())], &[]);
    assert!(build.ok(), "nix-build failed:\n{}", build.log);
    let out = &build.out_paths[0];
    if version().copies_sandbox_symlinks() {
        assert_eq!(read(&out.join("kind")), "symlink");
        assert_eq!(read(&out.join("content")), "unreachable");
    } else {
        assert_eq!(read(&out.join("kind")), "directory");
        assert_eq!(read(&out.join("content")), "through the link");
    }
}

#[test]
fn non_utf8_structured_attrs_are_refused_or_written_as_this_nix_does() {
    if !nix_available("non_utf8_structured_attrs_are_refused_or_written_as_this_nix_does") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("latin1.bin"), b"caf\xe9").unwrap();
    let file = nix_file(
        dir.path(),
        "latin1",
        "{ nonce }: derivation {\n  name = \"latin1\";\n  inherit nonce;\n  \
         system = builtins.currentSystem;\n  builder = \"/bin/sh\";\n  \
         __structuredAttrs = true;\n  \
         requiredSystemFeatures = [ \"cuda\" (builtins.readFile ./latin1.bin) ];\n}\n",
    );
    let out = Command::new("nix-instantiate")
        .arg(&file)
        .args(["--argstr", "nonce", &nonce()])
        .env("NIX_CONFIG", plain_sandbox().nix_config())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    if version().refuses_non_utf8_structured_attrs() {
        assert!(!out.status.success(), "Nix {} wrote it", version());
        assert!(log.contains("UTF-8"), "{log}");
    } else {
        assert!(out.status.success(), "{log}");
        let drv = String::from_utf8(out.stdout).unwrap();
        let bytes = std::fs::read(drv.trim()).unwrap();
        assert!(
            bytes.windows(4).any(|w| w == b"caf\xe9"),
            "the latin-1 bytes are kept"
        );
    }
}

#[test]
fn derivations_are_shown_as_json_by_this_nixs_command() {
    if !nix_available("derivations_are_shown_as_json_by_this_nixs_command") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = nix_file(
        dir.path(),
        "shown",
        &sh_derivation("shown", "echo built > $out", "\"cuda\""),
    );
    let out = Command::new("nix-instantiate")
        .arg(&file)
        .args(["--argstr", "nonce", &nonce()])
        .env("NIX_CONFIG", plain_sandbox().nix_config())
        .output()
        .unwrap();
    assert!(out.status.success());
    let drv = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let shown = Command::new("nix")
        .args(["--extra-experimental-features", "nix-command"])
        .args(version().derivation_show())
        .arg(&drv)
        .output()
        .unwrap();
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let entry = derivation_of(&json, &drv)
        .unwrap_or_else(|| panic!("{drv} not found in Nix {}'s JSON: {json:#}", version()));
    assert_eq!(entry["env"]["requiredSystemFeatures"], "cuda", "{entry:#}");
}

#[test]
fn nix_holds_the_build_users_userpool_lock_while_its_build_runs() {
    // The lease rule "a live process runs as the build's build user" reads the uids from the
    // `userpool/<uid>` files the Nix process holds open (checked on 2.8). Hold every version to
    // it: while a build runs, the Nix process that runs it has `userpool/<uid>` open, and the
    // builder runs as that uid.
    if !nix_available("nix_holds_the_build_users_userpool_lock_while_its_build_runs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let n = nonce();
    let marker = format!("userpool-{n}");
    let file = nix_file(
        dir.path(),
        "userpool",
        &sh_derivation(
            "userpool",
            // Long enough for a loaded machine (the whole suite under another Nix on two
            // cores) to start it: the test ends the build as soon as it has looked.
            &format!("sleep 300; : {marker}; echo built > $out"),
            "",
        ),
    );
    let mut cmd = Command::new("nix-build");
    cmd.arg(&file)
        .args(["--no-out-link", "--argstr", "nonce", &n])
        .env("NIX_CONFIG", plain_sandbox().nix_config());
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let nix_pid = child.id();
    let uid_of = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("Uid:"))?;
        line.split_whitespace().nth(1)?.parse::<u32>().ok()
    };
    let start = Instant::now();
    // The builder's uids are read while it runs, before anything is killed.
    let found = loop {
        let users = cuda_sandbox_hook::lease::Holder::of(nix_pid)
            .map(|h| h.build_users())
            .unwrap_or_default();
        let builder_uids: Vec<Option<u32>> =
            processes_with(&marker).into_iter().map(uid_of).collect();
        if !users.is_empty() && !builder_uids.is_empty() {
            break Some((users, builder_uids));
        }
        if start.elapsed() > Duration::from_secs(240) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    for pid in processes_with(&marker) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    let (users, builder_uids) = found.unwrap_or_else(|| {
        panic!(
            "Nix {} held no userpool/<uid> lock while its build ran",
            version()
        )
    });
    assert!(
        builder_uids
            .iter()
            .any(|u| u.is_some_and(|u| users.contains(&u))),
        "Nix {} holds userpool locks {users:?} but its builder runs as {builder_uids:?}",
        version()
    );
}

#[test]
fn no_two_nix_installations_here_share_a_build_uid() {
    // A Nix that takes a build user first kills every process running as its uid (Nix 2.8:
    // UserLock::kill in src/libstore/lock.cc; 2.34: prepareUser -> killSandbox in
    // src/libstore/unix/build/derivation-builder.cc), whichever Nix started it, while each
    // installation locks its users in its own `userpool`. The roots' users once had the host's
    // uids (995 was the host's nixbld2 and 2.34's nixbld1), and a host build SIGKILLed a 2.34
    // builder mid-build. Inside a root, scripts/with-nix shows the host's passwd and the roots'
    // cache under CUDA_SANDBOX_HOST_VIEW.
    if !nix_available("no_two_nix_installations_here_share_a_build_uid") {
        return;
    }
    let (mut files, roots) = match std::env::var("CUDA_SANDBOX_HOST_VIEW") {
        Ok(view) => (
            vec![Path::new(&view).join("passwd")],
            Path::new(&view).join("cache"),
        ),
        Err(_) => (
            vec![PathBuf::from("/etc/passwd")],
            std::env::var("CUDA_SANDBOX_NIX_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|_| {
                    Path::new(&std::env::var("HOME").unwrap()).join(".cache/cuda-sandbox")
                }),
        ),
    };
    if let Ok(entries) = std::fs::read_dir(&roots) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("nix-") {
                files.push(e.path().join("root/etc/passwd"));
            }
        }
    }
    let mine = build_uids(Path::new("/etc/passwd"));
    assert!(!mine.is_empty(), "Nix {} has no nixbld users", version());
    files.sort();
    files.dedup();
    let sets: Vec<(PathBuf, Vec<u32>)> = files
        .into_iter()
        .map(|f| {
            let uids = build_uids(&f);
            (f, uids)
        })
        .filter(|(_, u)| !u.is_empty())
        .collect();
    eprintln!("build uids: {sets:?}");
    assert!(
        sets.iter().any(|(_, u)| *u == mine),
        "this Nix's build users {mine:?} are none of {sets:?}"
    );
    for (i, (a, ua)) in sets.iter().enumerate() {
        for (b, ub) in &sets[i + 1..] {
            let shared: Vec<&u32> = ua.iter().filter(|u| ub.contains(u)).collect();
            assert!(
                shared.is_empty(),
                "{} and {} both have build uids {shared:?}: run scripts/nix-versions",
                a.display(),
                b.display()
            );
        }
    }
}

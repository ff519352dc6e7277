//! The root tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_config_reached_through_a_users_directory_is_refused() {
    if !root_available("a_config_reached_through_a_users_directory_is_refused") {
        return;
    }
    let h = Host::new();
    let real = h.trusted_config("");
    passes(&h.hook(&real));
    // The user links a config of its choice (here a root-owned, 0644 file, as a store path
    // would be) from a directory it owns: every component must be root's.
    let link = h.path("user/config.toml");
    as_user("ln", &[Path::new("-s"), &real, &link]);
    let (uid, _) = unprivileged_user();
    refused(&h.hook(&link), &[&format!("owned by uid {uid}"), "user"]);
    // A root-owned file in the user's directory can be swapped by the user: refused too.
    std::fs::remove_file(&link).unwrap();
    std::fs::copy(&real, &link).unwrap();
    refused(&h.hook(&link), &[&format!("owned by uid {uid}")]);
}

#[test]
fn a_nix_store_program_others_can_write_is_never_run() {
    if !root_available("a_nix_store_program_others_can_write_is_never_run") {
        return;
    }
    let h = Host::new();
    let marker = h.path("ran-as-root");
    let evil = h.path("user/nix-store");
    let script = h.path("evil.sh");
    write_script(
        &script,
        &format!("#!/bin/sh\ntouch {}\necho \"$3\"\n", marker.display()),
    )
    .unwrap();
    as_user("cp", &[&script, &evil]);
    let config = h.config(
        "trusted/config.toml",
        &format!("nix_store = \"{}\"\n", evil.display()),
    );
    refused(&h.hook(&config), &["refusing to run", "owned by uid"]);
    assert!(!marker.exists(), "the user's program ran as root");
    // A relative program is refused when the config is read.
    let config = h.config("trusted/config.toml", "nix_store = \"bin/nix-store\"\n");
    refused(&h.hook(&config), &["nix_store must be an absolute path"]);
}

#[test]
fn state_directories_a_user_owns_or_symlinks_are_refused() {
    if !root_available("state_directories_a_user_owns_or_symlinks_are_refused") {
        return;
    }
    let (uid, gid) = unprivileged_user();
    // The runtime directory made by the user before root: refused, nothing written in it.
    let h = Host::new();
    let config = h.trusted_config("");
    std::fs::create_dir_all(h.path("state")).unwrap();
    std::fs::create_dir(h.path("state/run")).unwrap();
    std::os::unix::fs::chown(h.path("state/run"), Some(uid), Some(gid)).unwrap();
    refused(&h.hook(&config), &[&format!("owned by uid {uid}")]);
    assert!(!h.path("state/run/manifests").exists());

    // A symlinked manifests directory: root must not write (or delete) through it.
    let h = Host::new();
    let config = h.trusted_config("");
    std::fs::create_dir_all(h.path("state/run")).unwrap();
    std::os::unix::fs::symlink(h.path("user"), h.path("state/run/manifests")).unwrap();
    let victim = h.path("user/victim.json");
    as_user("touch", &[&victim]);
    refused(&h.hook(&config), &["symlink"]);
    assert!(victim.exists(), "root deleted a file through the symlink");
    assert_eq!(std::fs::read_dir(h.path("user")).unwrap().count(), 1);

    // A closure cache the user owns, poisoned with an entry naming a symlinked store path.
    let h = Host::new();
    let config = h.trusted_config("");
    std::fs::create_dir_all(h.path("state")).unwrap();
    std::fs::create_dir(h.path("state/cache")).unwrap();
    std::os::unix::fs::chown(h.path("state/cache"), Some(uid), Some(gid)).unwrap();
    refused(
        &h.hook(&config),
        &["state/cache", &format!("owned by uid {uid}")],
    );

    // A lock file planted as a symlink: root must not create a file where it points.
    let h = Host::new();
    let config = h.trusted_config("gpus_per_build = 1\n");
    std::fs::create_dir_all(h.path("state/run/leases")).unwrap();
    std::fs::set_permissions(h.path("state"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let target = h.path("user/created-by-root");
    std::os::unix::fs::symlink(&target, h.path("state/run/leases/.lock")).unwrap();
    refused(&h.hook(&config), &[".lock"]);
    assert!(
        !target.exists(),
        "root created a file through the symlinked lock"
    );

    // Sound state directories are created 0700 and work.
    let h = Host::new();
    passes(&h.hook(&h.trusted_config("")));
    for d in ["state/run", "state/run/manifests", "state/cache"] {
        let mode = std::fs::metadata(h.path(d)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{d}");
    }
}

#[test]
fn a_symlinked_directory_mid_path_does_not_expose_host_files() {
    if !root_available("a_symlinked_directory_mid_path_does_not_expose_host_files") {
        return;
    }
    // /dev/nvidia-caps -> /etc made a host directory a "device".
    let h = Host::new();
    std::fs::create_dir_all(h.path("root/etc/nvidia-cap1")).unwrap();
    // Relative, so that it resolves inside the fake root on the real filesystem too.
    std::os::unix::fs::symlink("../etc", h.path("root/dev/nvidia-caps")).unwrap();
    let config = h.trusted_config("");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}[[rule.device]]\nglob = \"/dev/nvidia-caps/nvidia-cap1\"\n"),
    )
    .unwrap();
    let out = h.hook(&config);
    passes(&out);
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(!answer.contains("nvidia-cap1"), "{answer}");
    let explained = common::explain_output(&config, "cuda", false);
    assert!(
        explained.contains("symlink /dev/nvidia-caps leads to /etc"),
        "{explained}"
    );
}

#[test]
fn an_untagged_structured_derivation_stays_under_twice_its_size() {
    if !root_available("an_untagged_structured_derivation_stays_under_twice_its_size") {
        return;
    }
    // The whole __json was parsed into a serde_json::Value (about 18x the
    // file) for every derivation. 32 MiB here; the bench large_drv measures 100 MiB.
    let h = Host::new();
    let config = h.trusted_config("gpus_per_build = 1\n");
    let chunk = r#"line one\\n \\\"quoted\\\" "#;
    for features in ["big-parallel", "cuda"] {
        let drv = h.path(&format!("{features}.drv"));
        // Written a chunk at a time: a spawned child counts what this process holds as its
        // own peak RSS until it execs, so hold little.
        let file_kib = {
            use std::io::Write;
            let mut out = std::io::BufWriter::new(std::fs::File::create(&drv).unwrap());
            let head = r#"Derive([("out","/nix/store/x-out","","")],[],[],"x86_64-linux","/bin/sh",[],[("__json","{\"big\":\""#;
            let tail = format!(
                r#"\",\"cudaSandboxGpus\":1,\"requiredSystemFeatures\":[\"{features}\"]}}"),("out","/nix/store/x-out")])"#
            );
            let mut len = head.len() + tail.len();
            out.write_all(head.as_bytes()).unwrap();
            while len < 32 << 20 {
                out.write_all(chunk.as_bytes()).unwrap();
                len += chunk.len();
            }
            out.write_all(tail.as_bytes()).unwrap();
            out.flush().unwrap();
            (len / 1024) as i64
        };
        // Reaped below with wait4(2), which also gives its peak RSS.
        #[allow(clippy::zombie_processes)]
        let child = Command::new(HOOK)
            .arg(&drv)
            .arg(h.path("chroot"))
            .env("CUDA_SANDBOX_CONFIG", &config)
            // A pipe this process holds the read end of, as Nix does: the hook leases only for
            // a parent that reads its output.
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
        let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: our own unwaited child; both out-pointers are valid.
        let pid = unsafe { nix::libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
        assert_eq!(pid, child.id() as i32);
        assert_eq!(status, 0, "{features}");
        assert!(
            usage.ru_maxrss <= 2 * file_kib + 8 * 1024,
            "{features}: peak {} KiB for a {} KiB derivation",
            usage.ru_maxrss,
            file_kib
        );
    }
}

#[test]
fn a_fifo_config_never_hangs_a_build() {
    if !root_available("a_fifo_config_never_hangs_a_build") {
        return;
    }
    // The config was opened (blocking, on a FIFO) before it was checked,
    // so every build with a system feature hung, untagged ones too.
    let h = Host::new();
    let limit = std::time::Duration::from_secs(10);
    let (uid, gid) = unprivileged_user();
    let trusted = h.path("trusted/fifo.toml");
    nix::unistd::mkfifo(&trusted, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let planted = h.path("user/config.toml");
    nix::unistd::mkfifo(&planted, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    std::os::unix::fs::chown(&planted, Some(uid), Some(gid)).unwrap();
    for fifo in [&trusted, &planted] {
        let untagged = hook_within(&h, fifo, "big-parallel kvm", limit);
        passes(&untagged);
        assert!(untagged.stdout.is_empty());
        let tagged = hook_within(&h, fifo, "cuda", limit);
        refused(&tagged, &["refused"]);
    }
    let err =
        String::from_utf8_lossy(&hook_within(&h, &trusted, "cuda", limit).stderr).into_owned();
    assert!(err.contains("not a regular file"), "{err}");
}

#[test]
fn an_untrusted_config_is_not_read_even_for_the_precheck() {
    if !root_available("an_untrusted_config_is_not_read_even_for_the_precheck") {
        return;
    }
    // `may_answer` read the text of a config nobody had trusted (to see
    // whether a build's features appear in it). Now an untrusted file is never opened: the
    // untagged build still gets nothing, with the warning a refused config earns.
    let h = Host::new();
    let real = h.trusted_config("");
    let planted = h.path("user/config.toml");
    std::fs::copy(&real, &planted).unwrap();
    let (uid, gid) = unprivileged_user();
    std::os::unix::fs::chown(&planted, Some(uid), Some(gid)).unwrap();
    let limit = std::time::Duration::from_secs(10);
    let quiet = hook_within(&h, &real, "big-parallel", limit);
    passes(&quiet);
    assert!(quiet.stderr.is_empty(), "{quiet:?}");
    let untagged = hook_within(&h, &planted, "big-parallel", limit);
    passes(&untagged);
    assert!(untagged.stdout.is_empty());
    let err = String::from_utf8_lossy(&untagged.stderr);
    assert!(err.contains("refused") && err.contains("ignored"), "{err}");
}

#[test]
fn a_spec_nobody_links_into_a_sticky_spec_directory_is_refused() {
    if !root_available("a_spec_nobody_links_into_a_sticky_spec_directory_is_refused") {
        return;
    }
    // In a 1777 spec directory, nobody linked x.json to a store file of its own: the spec was
    // read, and its mount gave every tagged build the host's /etc/shadow.
    let h = Host::new();
    let shadow = h.path("root/etc/shadow");
    std::fs::create_dir_all(shadow.parent().unwrap()).unwrap();
    store_file(&shadow, "root:SECRET:19000::::::\n", 0o600);
    let evil = h.path("store/ccc-evil.json");
    store_file(
        &evil,
        r#"{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"all","containerEdits":{"mounts":[{"hostPath":"/etc/shadow","containerPath":"/etc/shadow"}]}}]}"#,
        0o444,
    );
    let specs = h.path("specs");
    dir_with_mode(&specs, 0o1777);
    link_as_nobody(&evil, &specs.join("x.json"));
    let config = h.path("trusted/cdi.toml");
    std::fs::write(
        &config,
        format!(
            "host_root = \"{}\"\nstore_dir = \"{}\"\nnix_store = \"{}\"\n\
             runtime_dir = \"{}\"\nclosure_cache = \"{}\"\ncdi_spec_dirs = [\"{}\"]\n\
             [[rule]]\nname = \"gpu\"\nfeatures = [\"cuda\"]\ncdi = [\"nvidia.com/gpu=all\"]\n",
            h.path("root").display(),
            h.path("store").display(),
            h.path("trusted/nix-store").display(),
            h.path("state/run").display(),
            h.path("state/cache").display(),
            specs.display()
        ),
    )
    .unwrap();
    let e = common::explain_json(&config, "cuda");
    let shown = e.to_string();
    assert!(
        !shown.contains(&shadow.display().to_string()),
        "the planted spec was read: {e:#}"
    );
    assert!(
        shown.contains("writable by group or others"),
        "the sticky spec directory was not refused: {e:#}"
    );
    refused(&h.hook(&config), &["nvidia.com/gpu=all"]);
}

#[test]
fn a_config_or_nix_store_nobody_links_into_a_sticky_directory_is_refused() {
    if !root_available("a_config_or_nix_store_nobody_links_into_a_sticky_directory_is_refused") {
        return;
    }
    // The same shape for the configuration and the program the hook runs as root: nobody's
    // link in a sticky directory, to a root-owned file (a store path nobody added).
    let h = Host::new();
    let sticky = h.path("sticky");
    dir_with_mode(&sticky, 0o1777);
    let real = h.trusted_config("");
    passes(&h.hook(&real));
    let link = sticky.join("config.toml");
    link_as_nobody(&real, &link);
    refused(
        &h.hook(&link),
        &["symlink", &format!("owned by uid {}", NOBODY.0)],
    );

    // A fresh host: the first one's closure cache would spare the hook running nix-store.
    let h = Host::new();
    let sticky = h.path("sticky");
    dir_with_mode(&sticky, 0o1777);
    let marker = h.path("ran-as-root");
    let program = h.path("store/ddd-nix-store");
    store_file(
        &program,
        &format!("#!/bin/sh\ntouch {}\necho \"$3\"\n", marker.display()),
        0o555,
    );
    let link = sticky.join("nix-store");
    link_as_nobody(&program, &link);
    let config = h.config(
        "trusted/config.toml",
        &format!("nix_store = \"{}\"\n", link.display()),
    );
    refused(
        &h.hook(&config),
        &["refusing to run", "symlink", &format!("uid {}", NOBODY.0)],
    );
    assert!(!marker.exists(), "nobody's link was run as root");
}

#[test]
fn the_nixos_chain_to_a_single_file_store_path_is_trusted() {
    if !root_available("the_nixos_chain_to_a_single_file_store_path_is_trusted") {
        return;
    }
    // NixOS: /etc/cuda-sandbox/config.toml -> /etc/static/cuda-sandbox/config.toml,
    // /etc/static -> /nix/store/…-etc/etc, whose entry links to a single-file store path
    // directly in /nix/store: root's, mode 1775, group-writable by the build users' group.
    // nix_store names a program of the same shape. The hook must keep trusting both.
    let h = Host::new();
    let store = h.path("store");
    let config_file = store.join("eee-config.toml");
    let trusted = h.trusted_config("");
    std::fs::copy(&trusted, &config_file).unwrap();
    std::fs::set_permissions(&config_file, std::fs::Permissions::from_mode(0o444)).unwrap();
    let nix_store = store.join("fff-nix-store");
    std::fs::copy(h.path("trusted/nix-store"), &nix_store).unwrap();
    std::fs::set_permissions(&nix_store, std::fs::Permissions::from_mode(0o555)).unwrap();
    let etc_in_store = store.join("ggg-etc/etc");
    std::fs::create_dir_all(etc_in_store.join("cuda-sandbox")).unwrap();
    std::os::unix::fs::symlink(&config_file, etc_in_store.join("cuda-sandbox/config.toml"))
        .unwrap();
    // The build users' group: a real group, not root's (nobody's here).
    std::os::unix::fs::chown(&store, Some(0), Some(NOBODY.1)).unwrap();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o1775)).unwrap();
    let etc = h.path("etc");
    std::fs::create_dir_all(etc.join("cuda-sandbox")).unwrap();
    std::os::unix::fs::symlink(&etc_in_store, etc.join("static")).unwrap();
    let config = etc.join("cuda-sandbox/config.toml");
    std::os::unix::fs::symlink(etc.join("static/cuda-sandbox/config.toml"), &config).unwrap();
    // nix_store through the system profile's bin, to the single-file store path.
    std::fs::create_dir_all(h.path("sw/bin")).unwrap();
    std::os::unix::fs::symlink(&nix_store, h.path("sw/bin/nix-store")).unwrap();
    let text = std::fs::read_to_string(&trusted).unwrap().replace(
        &h.path("trusted/nix-store").display().to_string(),
        &h.path("sw/bin/nix-store").display().to_string(),
    );
    std::fs::set_permissions(&config_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&config_file, text).unwrap();
    std::fs::set_permissions(&config_file, std::fs::Permissions::from_mode(0o444)).unwrap();
    let out = h.hook(&config);
    passes(&out);
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        answer.contains("bbb-dep"),
        "nix-store did not run: {answer}"
    );
}

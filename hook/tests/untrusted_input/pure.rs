//! The pure tier of these tests (docs/testing.md).

use super::*;

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
        let DrvAttrs {
            features,
            gpus,
            unsandboxed,
        } = timed(name, || DrvEnv::parse(&drv).unwrap().attrs().unwrap());
        assert_eq!(features.lossy(), ["cuda"], "{name}");
        assert!(features.structured);
        assert_eq!(gpus.as_deref(), Some("2"), "{name}");
        assert_eq!(unsandboxed, None, "{name}");
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

#[test]
fn the_forms_nix_reads_but_never_writes_parse_in_linear_time() {
    // 8 MiB of env entries without commas, of args with leading commas, and of input
    // derivation outputs nested (DrvWithVersion) about a million levels deep.
    let features = r#"("requiredSystemFeatures","cuda")])"#;
    let no_commas = big(
        r#"Derive([],[],[],"x","/bin/sh",[],["#,
        r#"("a","b")"#,
        features,
    );
    let leading = big(
        r#"Derive([],[],[],"x","/bin/sh",["#,
        r#","a""#,
        &format!("],[{features}"),
    );
    let levels = SIZE / 20;
    let nested = [
        br#"DrvWithVersion("xp-dyn-drv",[],[("/nix/store/d.drv","#.to_vec(),
        br#"([],[("o","#.repeat(levels),
        b"[]".to_vec(),
        b")])".repeat(levels),
        format!(r#")],[],"x","/bin/sh",[],[{features}"#).into_bytes(),
    ]
    .concat();
    for (name, drv) in [
        ("env without commas", no_commas),
        ("args with leading commas", leading),
        ("nested input outputs", nested),
    ] {
        let DrvAttrs { features, .. } =
            timed(name, || DrvEnv::parse(&drv).unwrap().attrs().unwrap());
        assert_eq!(features.lossy(), ["cuda"], "{name}");
    }
}

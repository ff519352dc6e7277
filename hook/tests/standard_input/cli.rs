//! The cli tier of these tests (docs/testing.md).

use super::*;

#[test]
fn a_pipe_that_never_closes_is_neither_waited_on_nor_read() {
    let host = Host::new();
    for (what, mut command) in host.commands() {
        let (mut reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(NOT_THE_HOOKS).unwrap();
        // `writer` stays open: a read of stdin past these bytes would block for ever.
        let out = run_within_limit(&what, &mut command, reader.try_clone().unwrap().into());
        assert_ran(&what, &out);
        drop(writer);
        let mut left = Vec::new();
        reader.read_to_end(&mut left).unwrap();
        assert_eq!(
            left,
            NOT_THE_HOOKS,
            "{what} read its standard input: {}",
            String::from_utf8_lossy(&left)
        );
    }
}

#[test]
fn a_terminal_nobody_types_into_is_not_waited_on() {
    let host = Host::new();
    for (what, mut command) in host.commands() {
        let run = run_on_a_fresh_terminal(&mut command, LIMIT);
        assert!(
            run.status.is_some_and(|s| s.success()),
            "{what} on a terminal: {run:?}"
        );
    }
}

/// NixOS/nix#16413 as it stands: the derivation's record in an anonymous file on stdin, the
/// `.drv` not on disk, and nothing in the environment saying so. The hook cannot tell that
/// file from any other standard input, so it leaves it unread and follows `missing_drv`.
#[test]
fn a_derivation_record_on_stdin_is_not_read_when_nix_does_not_name_it() {
    let host = Host::new();
    let record = host.path("record.json");
    std::fs::write(
        &record,
        r#"{"derivation":{"env":{"requiredSystemFeatures":"cuda"}},"outputs":{"out":"/nix/store/x-out"}}"#,
    )
    .unwrap();
    let mut file = std::fs::File::open(&record).unwrap();
    let (what, mut command) = host.commands().swap_remove(2);
    assert_eq!(what, "the hook, .drv absent");
    // The child's descriptor shares this one's offset: any read by the hook would move it.
    let out = run_within_limit(&what, &mut command, file.try_clone().unwrap().into());
    assert_ran(&what, &out);
    assert_eq!(file.stream_position().unwrap(), 0, "the hook read stdin");
    assert!(out.stdout.is_empty(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("absent.drv") && err.contains("missing_drv = \"skip\""),
        "{err}"
    );
    assert!(Path::new(&record).is_file());
}

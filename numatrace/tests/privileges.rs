//! Without the needed capabilities numatrace says so in one line and exits 1.

mod common;

use std::{os::unix::process::CommandExt, process::Command};

use common::{is_root, numatrace_bin};

#[test]
fn unprivileged_user_gets_one_line_error_and_exit_1() {
    for sub in [&["probes"][..], &["stat", "--duration", "1s"]] {
        let mut cmd = Command::new(numatrace_bin());
        cmd.args(sub);
        if is_root() {
            // nobody: no capabilities after the uid change.
            cmd.uid(65534).gid(65534);
        }
        let out = match cmd.output() {
            Ok(o) => o,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                common::skip(
                    "unprivileged_user_gets_one_line_error_and_exit_1",
                    format!("user nobody cannot execute {}: {e}", numatrace_bin()),
                );
                return;
            }
            Err(e) => panic!("running numatrace: {e}"),
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{sub:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{sub:?}: {stderr}");
        assert!(stderr.contains("root"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn bad_arguments_are_explained() {
    let out = Command::new(numatrace_bin())
        .args(["stat", "--duration", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("10s"),
        "suggests a valid duration: {stderr}"
    );
}

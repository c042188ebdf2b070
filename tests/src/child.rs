//! A test that runs its case in a child process (this test binary again, filtered to the test),
//! killed after a deadline: a case that deadlocks fails as a hang of the child instead of
//! stalling the suite.

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Runs the test `name` of this binary again in a child with `var` set (the child sees it and
/// runs the case), prints the child's output, and returns its exit status and stdout, or `None`
/// if it ran past `deadline` (then it was killed).
pub fn run_as_child(name: &str, var: &str, deadline: Duration) -> Option<(ExitStatus, String)> {
    let mut c = Command::new(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(var, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the test binary runs again");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = c.try_wait().expect("the child's status") {
            break Some(status);
        }
        if start.elapsed() > deadline {
            let _ = c.kill();
            let _ = c.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = c.wait_with_output().expect("the child's output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!(
        "--- child:\n{stdout}{}---",
        String::from_utf8_lossy(&out.stderr)
    );
    status.map(|s| (s, stdout))
}

/// The whole body of a GPU test whose case runs in a child: in the child (`var` set) it runs
/// `case`; in the parent it returns where [`gpu`](crate::gpu) finds no GPU (which says why), else
/// runs the test `name` again as a child and asserts that the child finished within `deadline`
/// (else it hung: `hang` says what that means), succeeded and printed `passed`.
pub fn gpu_case_in_child(
    name: &str,
    var: &str,
    deadline: Duration,
    passed: &str,
    hang: &str,
    case: impl FnOnce(),
) {
    if std::env::var_os(var).is_some() {
        case();
        return;
    }
    if crate::gpu().is_none() {
        return;
    }
    let Some((status, stdout)) = run_as_child(name, var, deadline) else {
        panic!("the child hung for {deadline:?} ({hang})")
    };
    assert!(status.success(), "the child failed: {status}");
    assert!(stdout.contains(passed), "the child ran no case");
}

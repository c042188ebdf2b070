//! Running a test binary again once per flavour, in child processes ([`run_in_each_flavour`]),
//! and printing past the test harness's capture ([`report`]).

use crate::{FLAVOUR_VAR, Flavour};

/// One flavour's run of a test binary in a child process (see [`run_in_each_flavour`]).
#[derive(Debug)]
pub struct FlavourRun {
    /// The flavour it ran against.
    pub flavour: &'static Flavour,
    /// How the child exited.
    pub status: std::process::ExitStatus,
    /// What it printed.
    pub stdout: String,
    /// What it printed to stderr.
    pub stderr: String,
}

impl FlavourRun {
    /// What its stdout lines say from `marker` on, for every line with `marker` in it (a line
    /// printed by a test under `--nocapture` may follow libtest's `test name ... ` on its line).
    pub fn lines_containing(&self, marker: &str) -> Vec<&str> {
        self.stdout
            .lines()
            .filter_map(|l| l.find(marker).map(|i| &l[i..]))
            .collect()
    }

    /// A report of a failed run: the flavour, the exit status, every panic's message (the
    /// panics tests expect included: the failing test's may be far from the end), and the end
    /// of both outputs.
    pub fn failure_report(&self) -> String {
        let tail = |s: &str| {
            let lines: Vec<&str> = s.lines().collect();
            lines[lines.len().saturating_sub(60)..].join("\n")
        };
        format!(
            "=== {} ({}): {}\n--- panics\n{}\n--- stdout (end)\n{}\n--- stderr (end)\n{}",
            self.flavour.name,
            self.flavour.key(),
            self.status,
            panic_messages(&self.stderr),
            tail(&self.stdout),
            tail(&self.stderr)
        )
    }
}

/// Each `thread '..' panicked at ..` line of `stderr` with the message lines after it (up to
/// its backtrace or note, 20 lines at most).
fn panic_messages(stderr: &str) -> String {
    let mut out = Vec::new();
    let mut lines = stderr.lines();
    while let Some(l) = lines.next() {
        if l.starts_with("thread '") && l.contains("panicked at") {
            out.push(l);
            out.extend(
                lines
                    .by_ref()
                    .take_while(|m| !m.starts_with("stack backtrace:") && !m.starts_with("note:"))
                    .take(20),
            );
        }
    }
    out.join("\n")
}

/// Runs the running test executable again once per flavour, all at once, each child with
/// [`FLAVOUR_VAR`] naming its flavour, `CUDA_SYS_LIBCUDA` its library (so that the process-wide
/// driver loads it, as it would libcuda), the environment `env` and the libtest arguments `args`
/// (such as `["--test-threads=1", "--nocapture", "--skip", "the_runner"]`); returns their outcomes
/// in the order of `flavours`. The mock's state is per process, so one flavour per process.
pub fn run_in_each_flavour(
    flavours: &[&'static Flavour],
    args: &[&str],
    env: &[(&str, &str)],
) -> Vec<FlavourRun> {
    let exe = std::env::current_exe().expect("the test executable");
    let children: Vec<_> = flavours
        .iter()
        .map(|f| {
            let mut cmd = std::process::Command::new(&exe);
            cmd.args(args)
                .env(FLAVOUR_VAR, f.key())
                .env("CUDA_SYS_LIBCUDA", f.path())
                .envs(env.iter().copied())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            (f, cmd.spawn().expect("the test executable runs again"))
        })
        .collect();
    children
        .into_iter()
        .map(|(f, child)| {
            let out = child.wait_with_output().expect("the child's output");
            FlavourRun {
                flavour: f,
                status: out.status,
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        })
        .collect()
}

/// Prints `line` past the test harness's output capture, so that it shows in `cargo test`'s
/// output even when the test passes.
pub fn report(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::panic_messages;

    #[test]
    fn a_report_keeps_each_panics_message_and_not_its_backtrace() {
        let stderr = "noise\n\
            thread 'a' (1) panicked at x.rs:1:2:\n\
            assertion `left == right` failed\n  left: 1\n right: 2\n\
            stack backtrace:\n   0: frame\n\
            thread 'b' (2) panicked at y.rs:3:4:\n\
            expected\n\
            note: run with `RUST_BACKTRACE=1`\n\
            more noise\n";
        assert_eq!(
            panic_messages(stderr),
            "thread 'a' (1) panicked at x.rs:1:2:\n\
             assertion `left == right` failed\n  left: 1\n right: 2\n\
             thread 'b' (2) panicked at y.rs:3:4:\n\
             expected"
        );
    }
}

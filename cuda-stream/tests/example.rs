//! The main example (`examples/streams.rs`) runs to its end against the test driver, which
//! computes its SAXPY kernel on the host (also when replayed from a graph), so every result check
//! of the example runs here too, with no race on memory (the driver's race detector prints each
//! race it finds, `races=print`); and without a driver it says so and exits with status 2.
//!
//! `cargo test` builds the example before the tests run; it lies in `target/<profile>/examples/`,
//! next to the folder of this test's executable.

use std::path::PathBuf;
use std::process::{Command, Output};

use cuda_mock_driver::mock_driver_path;

/// The example's executable, built with this test.
fn example() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let path = profile
        .join("examples")
        .join(format!("streams{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "{} is missing: `cargo test -p cuda-stream` builds it",
        path.display()
    );
    path
}

fn run(driver: &str, args: &[&str]) -> Output {
    let out = Command::new(example())
        .args(args)
        .env("CUDA_SYS_LIBCUDA", driver)
        .env("CUDA_MOCK_CONFIG", "races=print")
        .env_remove("CUDA_SYS_ABI_VERSION")
        .output()
        .expect("the example starts");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn the_example_checks_its_results_against_the_test_driver() {
    let driver = mock_driver_path();
    let out = run(
        driver.to_str().unwrap(),
        &["--elements", "65536", "--replays", "20"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "status {:?}", out.status);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let races: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("cuda-mock-driver: race:"))
        .collect();
    assert!(races.is_empty(), "the example races:\n{}", races.join("\n"));
    for line in [
        "CUDA driver 13.0 with 2 device(s)",
        "streams: high priority -5, low priority 0",
        "on high then low",
        "all 65536 results checked",
        "host functions ran in order (2)",
        "direct: 20 iterations",
        "graph: 20 replays of the same work captured once (3 nodes)",
        "graph replay vs direct, per iteration",
        "fork/join over two forks of the context's pool: all 65536 results checked",
        "ok",
    ] {
        assert!(stdout.contains(line), "no `{line}` in the output");
    }
}

#[test]
fn without_a_driver_the_example_says_so_and_exits_with_2() {
    let out = run("/nonexistent/libcuda.so.1", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no CUDA driver found"), "{stderr}");
    assert!(stderr.contains("/nonexistent/libcuda.so.1"), "{stderr}");
}

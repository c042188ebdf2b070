//! `CUDA_MOCK_CONFIG`: the environment sets the mock's baseline, checked in a child process.

use std::process::Command;

use cuda_stream_sys::*;

use super::{SUCCESS, destroy_stream, enter, leave, mock, stream};

/// Runs `env_config_child` in a new process with `CUDA_MOCK_CONFIG` set.
fn run_child(config: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "environment::env_config_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CUDA_MOCK_CONFIG", config)
        .output()
        .unwrap()
}

#[test]
fn the_environment_sets_the_baseline() {
    let out = run_child("fail=cuStreamCreate:1:2; version=12040; devices=1");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_child("omit=cuStreamGetId");
    assert!(
        !out.status.success(),
        "a configuration it cannot honour stops the process"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("FLAVOURS"));
}

/// Does nothing unless started by `the_environment_sets_the_baseline`.
#[test]
fn env_config_child() {
    if std::env::var_os("CUDA_MOCK_CONFIG").is_none() {
        return;
    }
    let (_g, m) = mock();
    assert_eq!(Driver::global().unwrap().version(), Ok(12040));
    let mut n = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDeviceGetCount(&mut n) }, SUCCESS);
    assert_eq!(n, 1);
    enter(0);
    let mut s = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuStreamCreate(&mut s, 0) };
    assert_eq!(rc, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    let s = stream(0);
    // A reset goes back to the environment's rules, counting afresh.
    m.set_version(1);
    m.reset();
    assert_eq!(Driver::global().unwrap().version(), Ok(12040));
    let mut t = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuStreamCreate(&mut t, 0) };
    assert_eq!(rc, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    assert_eq!(destroy_stream(s), SUCCESS);
    leave(0);
}

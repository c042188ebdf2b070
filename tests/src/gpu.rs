//! Finding the GPU, or skipping with a printed reason; checking raw driver results.

use cuda_stream::{Context, Device};
use cuda_stream_sys::{self as sys, CUresult};

/// The environment variable that turns a skipped test into a failure (for the GPU machine).
pub const REQUIRE_GPU_VAR: &str = "CUDA_STREAM_TESTS_REQUIRE_GPU";

fn skip(reason: String) -> Option<Context> {
    if std::env::var_os(REQUIRE_GPU_VAR).is_some_and(|v| !v.is_empty() && v != "0") {
        panic!("{REQUIRE_GPU_VAR} is set but the test cannot run: {reason}");
    }
    eprintln!("{reason}");
    None
}

/// An error with its `source()` chain, for messages.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The primary context of device 0, or `None` after printing why the test is skipped:
/// `skipped: no CUDA driver: <err>` or `skipped: no CUDA device`.
pub fn gpu() -> Option<Context> {
    match cuda_stream::init() {
        Ok(()) => {}
        Err(e) if e.driver_code() == Some(CUresult::CUDA_ERROR_NO_DEVICE) => {
            return skip("skipped: no CUDA device".to_string());
        }
        Err(e) => return skip(format!("skipped: no CUDA driver: {}", error_chain(&e))),
    }
    match Device::count() {
        Ok(0) => return skip("skipped: no CUDA device".to_string()),
        Ok(_) => {}
        Err(e) => return skip(format!("skipped: no CUDA driver: {}", error_chain(&e))),
    }
    Some(Context::primary(0).unwrap_or_else(|e| {
        panic!(
            "a device exists but its primary context failed: {}",
            error_chain(&e)
        )
    }))
}

/// The variable `gpu-bundle/run.sh` sets (to the tool's name) when it runs a test binary under
/// compute-sanitizer.
pub const SANITIZER_VAR: &str = "CUDA_STREAM_UNDER_SANITIZER";

/// The compute-sanitizer tool the test runs under, if any (from [`SANITIZER_VAR`]). A test whose
/// work the tool's bookkeeping cannot hold at full size (racecheck keeps host memory for every
/// thread of every kernel launch) runs smaller under one, with the same checks.
pub fn sanitizer() -> Option<String> {
    std::env::var(SANITIZER_VAR).ok().filter(|t| !t.is_empty())
}

/// Panics unless `rc` is `CUDA_SUCCESS`, naming the call and the code.
#[track_caller]
pub fn check(rc: CUresult, call: &str) {
    assert_eq!(
        rc,
        CUresult::CUDA_SUCCESS,
        "{call} failed: {} ({})",
        sys::result_name(rc),
        sys::result_description(rc)
    );
}

/// Serialises the tests of one binary that capture against the others: a capture is broken by
/// calls other tests make on their own threads (a global-mode capture by any potentially unsafe
/// call, any capture by a buffer's free, which waits for the whole context, as `cudaFree` does).
static CAPTURES: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held by a test that may run alongside the others (none of them capturing).
pub fn alongside_others() -> std::sync::RwLockReadGuard<'static, ()> {
    CAPTURES.read().unwrap_or_else(|e| e.into_inner())
}

/// Held by a test that captures: it runs alone.
pub fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    CAPTURES.write().unwrap_or_else(|e| e.into_inner())
}

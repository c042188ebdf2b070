//! Failure reporting: cold and out of line, so that the checks in the timed loops are one compare
//! and a branch that is never taken.

use std::fmt::Display;

use cuda_stream_sys as sys;

/// `e` and its chain of sources, joined with `: `.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Prints `cuda-stream-bench: <what> failed: <e>` and exits with status 1.
#[cold]
#[inline(never)]
pub(crate) fn fail(what: &str, e: &dyn Display) -> ! {
    eprintln!("cuda-stream-bench: {what} failed: {e}");
    std::process::exit(1)
}

#[cold]
#[inline(never)]
fn fail_rc(call: &str, rc: sys::CUresult) -> ! {
    fail(call, &sys::result_name(rc))
}

/// Checks a raw driver call's result.
#[inline(always)]
pub(crate) fn ok(rc: sys::CUresult, call: &str) {
    if rc != sys::CUresult::CUDA_SUCCESS {
        fail_rc(call, rc);
    }
}

/// Checks a safe call's result.
#[inline(always)]
pub(crate) fn must<T>(r: cuda_stream::Result<T>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => fail(what, &chain(&e)),
    }
}

/// Checks a cudarc call's result.
#[inline(always)]
pub(crate) fn must_cudarc<T>(r: Result<T, cudarc::driver::DriverError>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => fail(what, &e),
    }
}

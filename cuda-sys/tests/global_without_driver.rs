//! The process-wide driver, pointed at a file that does not exist: every entry point returns the
//! load error, and the C-shaped functions return its code. Runs in its own process (one test) so
//! the environment variable is set before anything loads.

use cuda_stream_sys::*;

#[test]
fn global_driver_failure_is_remembered_and_never_panics() {
    // SAFETY: this is the only test in this binary, so no other thread reads the environment.
    unsafe { std::env::set_var("CUDA_SYS_LIBCUDA", "/nonexistent/override/libcuda.so") };
    assert_eq!(
        Driver::candidates(),
        vec!["/nonexistent/override/libcuda.so"]
    );
    let err = Driver::global().unwrap_err();
    assert!(matches!(&err, LoadError::NotFound { tried } if tried.len() == 1));
    assert!(
        err.to_string().contains("/nonexistent/override/libcuda.so"),
        "{err}"
    );
    assert_eq!(fns::cuStreamQuery().unwrap_err(), err);
    // SAFETY: the call never reaches a driver; the arguments are not dereferenced.
    let rc = unsafe { cuStreamQuery(std::ptr::null_mut()) };
    assert_eq!(rc, CUresult::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED);
    assert!(Driver::global_if_loaded().is_none());
}

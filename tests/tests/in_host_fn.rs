//! CUDA calls from inside a host function, on the real driver: each operation of `cuda-stream`
//! that would call the driver there returns `Error::InHostFunction` at once. On the real driver
//! such a call is forbidden and can deadlock: `s.launch_host_func(move || s2.synchronize())`
//! (with `s2` a clone of `s`'s `Arc`) waits inside the host function for the host function
//! itself, and the driver's host-function thread never comes back.
//!
//! The operations run in a child process (this test binary again, filtered to the test), which
//! the parent kills after [`DEADLINE`]: a regression fails as a hang of the child instead of
//! stalling the suite.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::mpsc;
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use cuda_stream::{DeviceBuffer, Error, Result};
use cuda_stream_tests::{gpu, gpu_case_in_child};

/// How long the child may take; it needs well under a second.
const DEADLINE: Duration = Duration::from_secs(60);
/// How long the child waits for each host function to report.
const REPORT: Duration = Duration::from_secs(20);
const CHILD_VAR: &str = "CUDA_STREAM_IN_HOST_FN_CHILD";
const PASSED: &str = "in-host-function child passed";

/// Polls `fut` on this thread until it resolves, yielding between polls (inside a host function
/// the futures here resolve in their first poll).
fn block_on<F: Future>(fut: F) -> F::Output {
    struct Nothing;
    impl Wake for Nothing {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Nothing));
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut TaskContext::from_waker(&waker)) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// Runs the operations inside host functions (in the child).
fn child() {
    let ctx = gpu().expect("the parent found a GPU");
    let s = Arc::new(ctx.new_stream().unwrap());
    let buf = Arc::new(DeviceBuffer::<u32>::from_host(&ctx, &*s, &[1, 2, 3]).unwrap());
    let (tx, rx) = mpsc::channel::<(&'static str, Result<()>, Duration)>();
    type Op = Box<dyn FnOnce() -> Result<()> + Send>;
    let ops: Vec<(&'static str, Op)> = vec![
        ("synchronize of its own stream", {
            let s2 = s.clone();
            Box::new(move || s2.synchronize())
        }),
        ("query", {
            let s2 = s.clone();
            Box::new(move || s2.query().map(drop))
        }),
        ("record_event", {
            let s2 = s.clone();
            Box::new(move || s2.record_event().map(drop))
        }),
        ("DeviceBuffer::to_vec", {
            let (s2, b) = (s.clone(), buf.clone());
            Box::new(move || b.to_vec(&*s2).map(drop))
        }),
        ("block_on(completed())", {
            let s2 = s.clone();
            Box::new(move || block_on(s2.completed()))
        }),
        ("DeviceBuffer::alloc_on", {
            let (s2, c) = (s.clone(), ctx.clone());
            Box::new(move || DeviceBuffer::<u32>::alloc_on(&c, &*s2, 1024).map(drop))
        }),
        ("launch_host_func", {
            let s2 = s.clone();
            Box::new(move || s2.launch_host_func(|| ()))
        }),
    ];
    let n = ops.len();
    for (what, op) in ops {
        let tx = tx.clone();
        s.launch_host_func(move || {
            let start = Instant::now();
            let r = op();
            let _ = tx.send((what, r, start.elapsed()));
        })
        .unwrap();
    }
    for _ in 0..n {
        let (what, r, took) = rx
            .recv_timeout(REPORT)
            .expect("a host function did not come back (a deadlock)");
        println!("inside a host function: {what} -> {r:?} in {took:?}");
        assert!(
            matches!(r, Err(Error::InHostFunction { call }) if call.starts_with("cu")),
            "{what}: expected InHostFunction, got {r:?}"
        );
    }
    // The stream and the buffer work as before, outside.
    s.synchronize().unwrap();
    assert_eq!(buf.to_vec(&*s).unwrap(), [1, 2, 3]);
    println!("{PASSED}");
}

#[test]
fn cuda_calls_inside_a_host_function_return_an_error_instead_of_deadlocking() {
    gpu_case_in_child(
        "cuda_calls_inside_a_host_function_return_an_error_instead_of_deadlocking",
        CHILD_VAR,
        DEADLINE,
        PASSED,
        "a CUDA call inside a host function deadlocked",
        child,
    );
}

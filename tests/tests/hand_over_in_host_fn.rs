//! A stream handed over (`OwnedStream::into_raw`) inside a host function while another thread
//! records an event on it, on the real driver. The driver makes that record wait for a copy to
//! pageable host memory that a third thread makes on the host function's stream, which in turn
//! waits for the host function (measured with raw calls: `bin/blocking_calls`). The record runs
//! under the stream's end lock, so a hand-over that waited for that lock inside the host function
//! deadlocked: the cycle behind the random programs' seed 0x1c0 (tests/README.md).
//!
//! The case runs in a child process (this test binary again, filtered to the test), which the
//! parent kills after [`DEADLINE`]: a regression fails as a hang of the child instead of stalling
//! the suite.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use cuda_stream::DeviceBuffer;
use cuda_stream_sys as sys;
use cuda_stream_tests::{gpu, gpu_case_in_child};

/// How long the child may take; it needs about half a second.
const DEADLINE: Duration = Duration::from_secs(60);
/// How long the host function sleeps before it hands the stream over: the other threads are in
/// their driver calls by then.
const HOLD: Duration = Duration::from_millis(400);
const CHILD_VAR: &str = "CUDA_STREAM_HAND_OVER_CHILD";
const PASSED: &str = "hand-over child passed";

fn child() {
    let ctx = gpu().expect("the parent found a GPU");
    let s = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    // Written on `s` with no event after it (a lazy mark): a use on `other` records one on `s`,
    // under `s`'s end lock.
    let b = DeviceBuffer::<u32>::zeroed(&ctx, &s, 256).unwrap();
    let source = DeviceBuffer::<u32>::from_host(&ctx, &other, &[5; 256]).unwrap();
    other.synchronize().unwrap();
    source.to_vec(&ctx.legacy_stream()).unwrap();
    let (tx, rx) = mpsc::channel::<usize>();
    ctx.legacy_stream()
        .launch_host_func(move || {
            std::thread::sleep(HOLD);
            let _ = tx.send(s.into_raw() as usize);
        })
        .unwrap();
    let started = Instant::now();
    std::thread::scope(|sc| {
        // A copy to pageable memory on the legacy stream: it returns once done, after the host
        // function.
        let copy = sc.spawn(|| source.to_vec(&ctx.legacy_stream()).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        // Needs `b`'s write on `s` marked: an event recorded on `s` while the copy waits.
        b.fill(&other, 7).unwrap();
        assert_eq!(copy.join().unwrap(), vec![5; 256]);
    });
    println!(
        "the fill and the copy returned after {:?} (the host function held the legacy stream for {HOLD:?})",
        started.elapsed()
    );
    let raw = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the host function handed the stream over") as sys::CUstream;
    // The hand-over inside the host function did not wait: the record may have been under way.
    cuda_stream::drain_deferred();
    assert_eq!(b.to_vec(&other).unwrap(), vec![7; 256]);
    // SAFETY: the handle was handed over and nothing of this crate uses it any more (drained
    // above); it is destroyed once.
    let rc = unsafe { sys::cuStreamDestroy(raw) };
    assert_eq!(rc, sys::CUresult::CUDA_SUCCESS);
    println!("{PASSED}");
}

#[test]
fn a_stream_handed_over_in_a_host_function_does_not_wait_for_a_record_that_waits_for_it() {
    gpu_case_in_child(
        "a_stream_handed_over_in_a_host_function_does_not_wait_for_a_record_that_waits_for_it",
        CHILD_VAR,
        DEADLINE,
        PASSED,
        "the hand-over waited for the record: a deadlock",
        child,
    );
}

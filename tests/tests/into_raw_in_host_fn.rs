//! `DeviceBuffer::into_raw` inside a host function, of a buffer whose write on a stream is
//! unmarked, while another thread records an event on that stream under its end's lock, on the
//! real driver. The driver makes that record wait for a copy to pageable host memory that a third
//! thread makes on the host function's stream, which waits for the host function (measured with
//! raw calls: `bin/blocking_calls`): had `into_raw` locked the stream's end to mark the use, the
//! host function would have waited for itself. Inside a host function `into_raw` is refused
//! (`InHostFunction`: no wait can be made there) before anything is locked, and the buffer comes
//! back. (The test driver's case, `tests/mock-driver/tests/in_host_fn.rs`, failed before the
//! fix.)
//!
//! The case runs in a child process (this test binary again, filtered to the test), which the
//! parent kills after [`DEADLINE`]: a regression fails as a hang of the child instead of stalling
//! the suite.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use cuda_stream::{DeviceBuffer, Error};
use cuda_stream_tests::{gpu, gpu_case_in_child};

/// How long the child may take; it needs about half a second.
const DEADLINE: Duration = Duration::from_secs(60);
/// How long the host function sleeps before `into_raw`: the other threads are in their driver
/// calls by then.
const HOLD: Duration = Duration::from_millis(400);
const CHILD_VAR: &str = "CUDA_STREAM_INTO_RAW_IN_HOST_FN_CHILD";
const PASSED: &str = "into_raw child passed";

fn child() {
    let ctx = gpu().expect("the parent found a GPU");
    let s = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    // Both written on `s` with no event after it (lazy marks): a use of `held` on `other`
    // records one on `s`, under `s`'s end lock; `handed` is handed over in the host function.
    let held = DeviceBuffer::<u32>::zeroed(&ctx, &s, 256).unwrap();
    let handed = DeviceBuffer::<u32>::zeroed(&ctx, &s, 256).unwrap();
    let source = DeviceBuffer::<u32>::from_host(&ctx, &other, &[5; 256]).unwrap();
    other.synchronize().unwrap();
    source.to_vec(&ctx.legacy_stream()).unwrap();
    let (tx, rx) = mpsc::channel::<(bool, Option<DeviceBuffer<u32>>)>();
    ctx.legacy_stream()
        .launch_host_func(move || {
            std::thread::sleep(HOLD);
            let answer = match handed.into_raw() {
                Ok(_) => (false, None),
                Err(e) => {
                    let refused = matches!(e.error(), Some(Error::InHostFunction { .. }));
                    (refused, Some(e.into_buffer()))
                }
            };
            let _ = tx.send(answer);
        })
        .unwrap();
    let started = Instant::now();
    std::thread::scope(|sc| {
        // A copy to pageable memory on the legacy stream: it returns once done, after the host
        // function.
        let copy = sc.spawn(|| source.to_vec(&ctx.legacy_stream()).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        // Needs `held`'s write on `s` marked: an event recorded on `s` while the copy waits.
        held.fill(&other, 7).unwrap();
        assert_eq!(copy.join().unwrap(), vec![5; 256]);
    });
    println!(
        "the fill and the copy returned after {:?} (the host function held the legacy stream for {HOLD:?})",
        started.elapsed()
    );
    let (refused, back) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the host function answered");
    assert!(refused, "into_raw inside a host function: InHostFunction");
    // The buffer came back whole, its write still tracked.
    let back = back.expect("the buffer comes back with the refusal");
    assert_eq!(back.to_vec(&other).unwrap(), vec![0; 256]);
    assert_eq!(held.to_vec(&other).unwrap(), vec![7; 256]);
    cuda_stream::drain_deferred();
    println!("{PASSED}");
}

#[test]
fn into_raw_inside_a_host_function_does_not_wait_for_a_record_that_waits_for_it() {
    gpu_case_in_child(
        "into_raw_inside_a_host_function_does_not_wait_for_a_record_that_waits_for_it",
        CHILD_VAR,
        DEADLINE,
        PASSED,
        "into_raw waited for the stream's end while the record under it waited for the host function: a deadlock",
        child,
    );
}

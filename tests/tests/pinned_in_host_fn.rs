//! Page-locked memory read inside a host function while another thread waits on the host for a
//! copy into it, a copy enqueued after that host function, on the real driver. The waiting
//! thread (`as_slice`) holds the buffer's list of copies while it waits for the copy's event, and
//! the copy waits for the host function: had the host function waited for that list, it would
//! have waited for itself. Inside a host function the list is only tried: `try_as_slice` answers
//! `Busy`, `copies_in_flight` the count noted at the last unlock, `as_slice` `InHostFunction`.
//! (The test driver's case, `tests/mock-driver/tests/in_host_fn.rs`, failed before the fix.)
//!
//! The case runs in a child process (this test binary again, filtered to the test), which the
//! parent kills after [`DEADLINE`]: a regression fails as a hang of the child instead of stalling
//! the suite.

use std::sync::{Arc, mpsc};
use std::time::Duration;

use cuda_stream::{DeviceBuffer, Error, PinnedHostBuffer};
use cuda_stream_tests::{gpu, gpu_case_in_child};

/// How long the child may take; it needs a fraction of a second.
const DEADLINE: Duration = Duration::from_secs(60);
const CHILD_VAR: &str = "CUDA_STREAM_PINNED_IN_HOST_FN_CHILD";
const PASSED: &str = "page-locked child passed";
const LEN: usize = 1 << 16;

fn child() {
    let ctx = gpu().expect("the parent found a GPU");
    let s = ctx.new_stream().unwrap();
    let d = DeviceBuffer::from_host(&ctx, &s, &vec![3u32; LEN]).unwrap();
    let mut pinned = PinnedHostBuffer::<u32>::zeroed(&ctx, LEN).unwrap();
    let (give, take) = mpsc::channel::<Arc<PinnedHostBuffer<u32>>>();
    let (tell, told) = mpsc::channel::<(bool, usize, bool)>();
    // Ahead of the copy on `s`: waits for the buffer (the reading thread is waiting by then),
    // then reads it three ways.
    s.launch_host_func(move || {
        let p = take.recv().unwrap();
        let busy = matches!(p.try_as_slice(), Err(Error::Busy { .. }));
        let count = p.copies_in_flight();
        let refused = matches!(p.as_slice(), Err(Error::InHostFunction { .. }));
        let _ = tell.send((busy, count, refused));
    })
    .unwrap();
    d.copy_to_pinned(&s, &mut pinned).unwrap();
    let pinned = Arc::new(pinned);
    std::thread::scope(|sc| {
        // Waits on the host for the copy, which runs after the host function.
        let reader = sc.spawn(|| pinned.as_slice().map(|v| v.to_vec()));
        std::thread::sleep(Duration::from_millis(100));
        give.send(pinned.clone()).unwrap();
        let (busy, count, refused) = told
            .recv_timeout(DEADLINE)
            .expect("the host function answered");
        assert!(
            busy,
            "try_as_slice inside the host function: Busy while the copy waits"
        );
        assert_eq!(count, 1, "the copy in flight, as last noted");
        assert!(
            refused,
            "as_slice inside the host function would wait: refused"
        );
        assert_eq!(reader.join().unwrap().unwrap(), vec![3; LEN]);
    });
    println!("{PASSED}");
}

#[test]
fn page_locked_memory_read_inside_a_host_function_never_waits_for_a_waiting_thread() {
    gpu_case_in_child(
        "page_locked_memory_read_inside_a_host_function_never_waits_for_a_waiting_thread",
        CHILD_VAR,
        DEADLINE,
        PASSED,
        "the host function waited for the lock the reading thread held: a deadlock",
        child,
    );
}

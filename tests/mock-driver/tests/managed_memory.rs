//! Managed memory (`ManagedBuffer`) against the test driver, whose managed memory is host memory
//! at its device address (the host reads what queued work wrote): host access waits for the
//! device work recorded on the buffer (a late fill behind a gate is seen, 20 rounds), the host's
//! writes reach later device work on any stream, prefetches both ways are recorded uses (host
//! access waits for them) through the CUDA 12.2 form, advice reaches the driver, work on managed
//! memory is refused in a capture, the race detector sees nothing unordered, and a use no event
//! marks (a failed record) is covered by the context's completion at the next host access.

use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::{CaptureMode, Context, Error, ManagedBuffer, MemAdvice, MemLocation};

static LOCK: Mutex<()> = Mutex::new(());

fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (m.checked(guard), m)
}

/// Holds `stream`'s later work until the returned sender is dropped (or a second passes).
fn gate(stream: &cuda_stream::OwnedStream) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    stream
        .launch_host_func(move || {
            let _ = rx.recv_timeout(Duration::from_secs(1));
        })
        .expect("host function");
    tx
}

/// Opens the gate from another thread after 20 ms.
fn open_later(g: mpsc::Sender<()>) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        drop(g);
    });
}

#[test]
fn host_access_waits_for_the_device_work_recorded_on_the_buffer() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let mut x = ManagedBuffer::<u32>::zeroed(&ctx, 4096).unwrap();
    assert_eq!(x.as_slice().unwrap(), vec![0; 4096]);
    for round in 1..=20u32 {
        open_later(gate(&s));
        x.fill(&s, round).unwrap();
        // The fill is still queued behind the gate: the read waits for it.
        assert_eq!(x.as_slice().unwrap(), vec![round; 4096], "round {round}");
        // The host's write reaches device work on another stream.
        x.as_mut_slice().unwrap()[7] = 1000 + round;
        let back = x.to_vec(&t).unwrap();
        assert_eq!(back[7], 1000 + round);
        assert_eq!(back[8], round);
    }
    drop(x);
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn prefetches_are_recorded_uses_and_advice_reaches_the_driver() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let mut x = ManagedBuffer::<f32>::from_slice(&ctx, &[1.5; 256]).unwrap();
    let g = gate(&s);
    x.prefetch_to_device(&s).unwrap();
    x.prefetch_to_host(&s).unwrap();
    assert_eq!(m.calls("cuMemPrefetchAsync_v2"), 2, "the CUDA 12.2 form");
    open_later(g);
    // Waits for both prefetches (queued behind the gate) before the host reads.
    assert_eq!(x.as_slice().unwrap(), [1.5; 256]);
    assert_eq!(m.pending_host_fns(), 0);
    let d = ctx.device();
    for advice in [
        MemAdvice::ReadMostly(true),
        MemAdvice::ReadMostly(false),
        MemAdvice::PreferredLocation(Some(MemLocation::Device(d))),
        MemAdvice::PreferredLocation(Some(MemLocation::Host)),
        MemAdvice::PreferredLocation(None),
        MemAdvice::AccessedBy(MemLocation::Device(d), true),
        MemAdvice::AccessedBy(MemLocation::Device(d), false),
    ] {
        x.advise(advice).unwrap();
    }
    assert_eq!(m.calls("cuMemAdvise_v2"), 7);
    // A stream of another context cannot prefetch it.
    let other = Context::primary(1).unwrap().new_stream().unwrap();
    assert!(matches!(
        x.prefetch_to_device(&other),
        Err(Error::ContextMismatch { .. })
    ));
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
}

#[test]
fn managed_memory_is_refused_in_captures_and_tracked_for_kernels() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let mut s = ctx.new_stream().unwrap();
    let x = ManagedBuffer::<u32>::zeroed(&ctx, 64).unwrap();
    let r = s.capture(CaptureMode::ThreadLocal, |cap| x.fill(&cap, 3));
    match r {
        Err(Error::Refused { reason, .. }) => assert!(reason.contains("graphs"), "{reason}"),
        other => panic!("{other:?}"),
    }
    x.prefetch_to_device(&s).unwrap();
    let r = s.capture(CaptureMode::ThreadLocal, |cap| x.prefetch_to_device(&cap));
    assert!(matches!(r, Err(Error::Refused { .. })), "{r:?}");
    // An empty buffer allocates nothing.
    let calls = m.calls("cuMemAllocManaged");
    let mut empty = ManagedBuffer::<u32>::zeroed(&ctx, 0).unwrap();
    assert!(empty.as_slice().unwrap().is_empty());
    assert_eq!(m.calls("cuMemAllocManaged"), calls);
}

#[test]
fn host_access_after_a_use_nothing_marks_waits_for_the_context() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let t = ctx.new_stream().unwrap();
    let mut x = ManagedBuffer::<u32>::zeroed(&ctx, 64).unwrap();
    // A borrowed stream may be captured by other code: a use there is marked by an event at
    // once. That record fails, so the use is one no event marks (found by the random programs:
    // host access then failed for good).
    // SAFETY: t outlives the view, and nothing else uses it.
    let borrowed = unsafe { cuda_stream::Stream::borrow_raw(t.raw(), &t) }.unwrap();
    m.fail(
        "cuEventRecord",
        1,
        cuda_stream::ffi::CUresult::CUDA_ERROR_UNKNOWN,
    );
    assert!(x.fill(&borrowed, 2).is_err());
    m.clear_failures();
    let syncs = m.calls("cuCtxSynchronize");
    let got = x.as_slice().unwrap().to_vec();
    assert!(got == [0; 64] || got == [2; 64], "{got:?}");
    assert!(
        m.calls("cuCtxSynchronize") > syncs,
        "covered by the context's completion"
    );
    // And the uses are forgotten: the next host access needs no wait.
    x.as_mut_slice().unwrap().fill(3);
    assert_eq!(x.to_vec(&t).unwrap(), [3; 64]);
}

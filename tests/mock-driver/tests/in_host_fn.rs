//! CUDA calls from inside a host function, against the mock driver: every operation of
//! `cuda-stream` that would call the driver there returns `Error::InHostFunction` naming the
//! call, before the driver sees anything. The mock refuses any call made from inside one of its
//! host functions (`CUDA_ERROR_NOT_PERMITTED`) and counts it, so a call that slipped through
//! shows as a driver error and a count; a real driver can deadlock instead
//! (`s.launch_host_func(move || s2.synchronize())` waits for the host function itself).
//!
//! Each operation runs inside a host function on the mock's worker and sends its result back
//! through a channel.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Wake, Waker};

use cuda_mock_driver::MockDriver;
use cuda_stream::{
    CaptureMode, Context, DeviceBuffer, Error, EventOptions, OwnedStream, StreamPool,
};

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the mock as the process-wide driver (once) and resets it.
fn mock() -> (MutexGuard<'static, ()>, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (guard, m)
}

/// Polls `fut` to its end on this thread (a waker that does nothing: the futures here resolve
/// in their first poll or never).
fn block_on<F: Future>(fut: F) -> F::Output {
    struct Nothing;
    impl Wake for Nothing {
        fn wake(self: Arc<Self>) {}
    }
    let waker = Waker::from(Arc::new(Nothing));
    let mut fut = std::pin::pin!(fut);
    for _ in 0..1_000 {
        if let Poll::Ready(v) = Pin::new(&mut fut).poll(&mut TaskContext::from_waker(&waker)) {
            return v;
        }
        std::thread::yield_now();
    }
    panic!("the future did not resolve");
}

/// Runs `op` inside a host function on `s` and returns what it returned, once the stream has
/// run it.
fn inside<T: Send + 'static>(
    s: &OwnedStream,
    op: impl FnOnce() -> cuda_stream::Result<T> + Send + 'static,
) -> cuda_stream::Result<T> {
    let (tx, rx) = mpsc::channel();
    s.launch_host_func(move || {
        let _ = tx.send(op());
    })
    .expect("the host function is enqueued");
    s.synchronize().expect("the stream runs it");
    rx.recv().expect("the host function ran")
}

/// Asserts that `r` is `Error::InHostFunction` naming a driver function (the first one the
/// operation would have called).
#[track_caller]
fn refused<T: std::fmt::Debug>(what: &str, r: cuda_stream::Result<T>) {
    match &r {
        Err(Error::InHostFunction { call }) if call.starts_with("cu") => {
            println!("{what}: refused before {call}");
        }
        _ => panic!("{what} inside a host function: expected InHostFunction, got {r:?}"),
    }
}

/// The pattern: a host function that synchronizes its own stream (through a clone of the
/// `Arc` that owns it) gets the error, and the driver is never called from the host function.
#[test]
fn a_host_function_that_synchronizes_its_own_stream_gets_an_error() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = Arc::new(ctx.new_stream().unwrap());
    let s2 = s.clone();
    let syncs = m.calls("cuStreamSynchronize");
    let r = inside(&s, move || s2.synchronize());
    refused("synchronize", r);
    assert_eq!(
        m.host_fn_api_calls(),
        0,
        "the driver was called from the host function"
    );
    assert_eq!(
        m.calls("cuStreamSynchronize"),
        syncs + 1,
        "only the test's own synchronize reached the driver"
    );
}

/// One operation of each kind, each inside a host function: none reaches the driver.
#[test]
fn every_kind_of_operation_is_refused_inside_a_host_function() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let other = Arc::new(ctx.new_stream().unwrap());
    let buf = Arc::new(DeviceBuffer::<u32>::from_host(&ctx, &s, &[1, 2, 3]).unwrap());
    let event = Arc::new(other.record_event().unwrap());
    let pool = Arc::new(StreamPool::new(&ctx, Default::default()));
    s.synchronize().unwrap();
    let before = m.host_fn_api_calls();

    let (o, b) = (other.clone(), buf.clone());
    refused("DeviceBuffer::to_vec", inside(&s, move || b.to_vec(&*o)));
    let o = other.clone();
    refused(
        "block_on(completed())",
        inside(&s, move || block_on(o.completed())),
    );
    let (o, e) = (other.clone(), event.clone());
    refused("record", inside(&s, move || o.record(&e)));
    let (o, e) = (other.clone(), event.clone());
    refused("wait_event", inside(&s, move || o.wait_event(&e)));
    let o = other.clone();
    refused("query", inside(&s, move || o.query()));
    let (o, c) = (other.clone(), ctx.clone());
    refused(
        "DeviceBuffer::alloc_on",
        inside(&s, move || {
            DeviceBuffer::<u32>::alloc_on(&c, &*o, 16).map(drop)
        }),
    );
    let (o, b) = (other.clone(), buf.clone());
    refused("DeviceBuffer::fill", inside(&s, move || b.fill(&*o, 7)));
    let c = ctx.clone();
    refused(
        "Context::new_stream",
        inside(&s, move || c.new_stream().map(drop)),
    );
    let (o, e) = (other.clone(), event.clone());
    refused(
        "Event::synchronize",
        inside(&s, move || {
            let _keep = o;
            e.synchronize()
        }),
    );
    let c = ctx.clone();
    refused("Context::synchronize", inside(&s, move || c.synchronize()));
    let o = other.clone();
    refused(
        "Stream::scope",
        inside(&s, move || o.scope(|f| f.fork().map(drop))),
    );
    let p = pool.clone();
    refused(
        "StreamPool::acquire",
        inside(&s, move || p.acquire()?.launch_host_func(|| ())),
    );
    let o = other.clone();
    refused(
        "launch_host_func",
        inside(&s, move || o.launch_host_func(|| ())),
    );
    let o = other.clone();
    refused(
        "record_event_with(timing)",
        inside(&s, move || {
            o.record_event_with(EventOptions::new().timing(true))
                .map(drop)
        }),
    );
    let o = other.clone();
    refused("capture_status", inside(&s, move || o.capture_status()));
    let c = ctx.clone();
    refused(
        "OwnedStream::capture",
        inside(&s, move || {
            let mut own = OwnedStream::new(&c, Default::default())?;
            own.capture(CaptureMode::ThreadLocal, |_| Ok(())).map(drop)
        }),
    );
    assert_eq!(
        m.host_fn_api_calls(),
        before,
        "the driver was called from a host function"
    );
    // Everything still works outside.
    assert_eq!(buf.to_vec(&s).unwrap(), [1, 2, 3]);
    other.synchronize().unwrap();
}

/// A stream handed over (`into_raw`) inside a host function while another thread records an
/// event on it under its end's lock: the hand-over does not wait for that lock. On a GPU the
/// record can wait in the driver for a copy to pageable memory that waits for the host function
/// (tests/hand_over_in_host_fn.rs), so a hand-over that waited deadlocked; here the mock's pause
/// holds the record's caller, with the lock, until the host function has handed the stream over.
/// The next holder of the lock (or the queued item `drain_deferred` runs) ends the epoch as lost.
#[test]
fn a_hand_over_inside_a_host_function_does_not_wait_for_a_record_under_the_ends_lock() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let runner = ctx.new_stream().unwrap();
    // Written on `s` with no event after it: a use on `other` records one on `s`, under its lock.
    let b = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    let (tx, rx) = mpsc::channel::<usize>();
    std::thread::scope(|sc| {
        m.pause_after("cuEventRecord");
        let fill = sc.spawn(|| b.fill(&other, 7));
        m.wait_until_paused("the record never came");
        runner
            .launch_host_func(move || {
                let _ = tx.send(s.into_raw() as usize);
            })
            .unwrap();
        let handed = rx.recv_timeout(std::time::Duration::from_secs(10));
        m.resume();
        fill.join().unwrap().unwrap();
        let raw = handed.expect("the hand-over waited for the lock the record held");
        assert!(
            cuda_stream::drain_deferred() >= 1,
            "the end's completion was queued"
        );
        assert_eq!(b.to_vec(&other).unwrap(), vec![7; 64]);
        // SAFETY: handed over above and no longer used by this crate (drained); destroyed once.
        let rc = unsafe { cuda_stream_sys::cuStreamDestroy(raw as cuda_stream_sys::CUstream) };
        assert_eq!(rc, cuda_stream_sys::CUresult::CUDA_SUCCESS);
    });
}

/// Page-locked memory read inside a host function while another thread waits for a copy into it
/// that runs after that host function: the host function never waits for the lock the waiting
/// thread holds (it would wait for itself). `try_as_slice` says `Busy`, `copies_in_flight` gives
/// the count last noted, `as_slice` is refused (it would wait).
#[test]
fn page_locked_memory_read_inside_a_host_function_never_waits_for_a_waiting_thread() {
    let (_lock, _m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let d = DeviceBuffer::from_host(&ctx, &s, &[3u32; 16]).unwrap();
    let mut pinned = cuda_stream::PinnedHostBuffer::<u32>::zeroed(&ctx, 16).unwrap();
    let (give, take) = mpsc::channel::<Arc<cuda_stream::PinnedHostBuffer<u32>>>();
    let (tell, told) = mpsc::channel::<(bool, usize, bool)>();
    // Ahead of the copy on `s`: waits for the buffer, then reads it three ways.
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
        std::thread::sleep(std::time::Duration::from_millis(50));
        give.send(pinned.clone()).unwrap();
        let Ok((busy, count, refused)) = told.recv_timeout(std::time::Duration::from_secs(10))
        else {
            // The reading thread cannot be joined: it waits for the copy behind the stuck host
            // function.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "the host function waited for the lock the reading thread held: deadlock"
            );
            std::process::abort();
        };
        assert!(
            busy,
            "try_as_slice inside the host function: Busy while the copy waits"
        );
        assert_eq!(count, 1, "the copy in flight, as last noted");
        assert!(
            refused,
            "as_slice inside the host function would wait: refused"
        );
        assert_eq!(reader.join().unwrap().unwrap(), vec![3; 16]);
    });
}

/// `DeviceBuffer::into_raw` inside a host function, of a buffer whose write on a stream is
/// unmarked, while another thread records an event on that stream under its end's lock (held by
/// the mock's pause): refused at once (no wait can be made there), never waiting for the lock.
#[test]
fn into_raw_of_a_buffer_inside_a_host_function_never_waits_for_a_streams_end() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let runner = ctx.new_stream().unwrap();
    let held = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    let handed = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    let (tx, rx) = mpsc::channel::<bool>();
    std::thread::scope(|sc| {
        m.pause_after("cuEventRecord");
        let fill = sc.spawn(|| held.fill(&other, 7));
        m.wait_until_paused("the record never came");
        runner
            .launch_host_func(move || {
                let refused = match handed.into_raw() {
                    Ok(_) => false,
                    Err(e) => matches!(e.error(), Some(Error::InHostFunction { .. })),
                };
                let _ = tx.send(refused);
            })
            .unwrap();
        let answer = rx.recv_timeout(std::time::Duration::from_secs(10));
        m.resume();
        fill.join().unwrap().unwrap();
        assert!(
            answer.expect("into_raw inside the host function waited for the stream's end"),
            "into_raw inside a host function: InHostFunction"
        );
    });
    runner.synchronize().unwrap();
    assert_eq!(held.to_vec(&other).unwrap(), vec![7; 64]);
}

/// A stream handed over inside a host function while another thread frees a buffer used on it,
/// holding the stream's end lock (found lasting) between its capture check and its waits: the
/// hand-over must not mark the epoch ended under that holder, which then takes the uses on the
/// stream for uses elsewhere and locks the end again (a deadlock on its own lock). The mock's
/// pause holds the free right after its `cuStreamIsCapturing`, with the lock.
#[test]
fn a_hand_over_inside_a_host_function_leaves_a_lock_holders_view_of_the_end_alone() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let runner = ctx.new_stream().unwrap();
    // A write and a read on `s`, neither marked: the free takes its slow path on `s`.
    let b = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    let d = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    d.copy_from(&s, &b).unwrap();
    let (tx, rx) = mpsc::channel::<usize>();
    let (freed_tx, freed_rx) = mpsc::channel::<cuda_stream::Result<()>>();
    m.pause_after("cuStreamIsCapturing");
    let freeing = std::thread::spawn(move || {
        let _ = freed_tx.send(b.free());
    });
    m.wait_until_paused("the free never asked");
    runner
        .launch_host_func(move || {
            let _ = tx.send(s.into_raw() as usize);
        })
        .unwrap();
    let raw = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the hand-over waited for the free's lock");
    m.resume();
    let Ok(freed) = freed_rx.recv_timeout(std::time::Duration::from_secs(10)) else {
        // The freeing thread cannot be joined: it waits for a lock it holds.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "the free locked the stream's end again after the hand-over marked it ended: deadlock"
        );
        std::process::abort();
    };
    freed.unwrap();
    freeing.join().unwrap();
    assert!(
        cuda_stream::drain_deferred() >= 1,
        "the end's completion was queued"
    );
    assert_eq!(d.to_vec(&runner).unwrap(), vec![0; 64]);
    // SAFETY: handed over above and no longer used by this crate (drained); destroyed once.
    let rc = unsafe { cuda_stream_sys::cuStreamDestroy(raw as cuda_stream_sys::CUstream) };
    assert_eq!(rc, cuda_stream_sys::CUresult::CUDA_SUCCESS);
}

//! The ordering model's known holes (`cuda-stream/src/memory/use_tracking/mod.rs` states the
//! model), each against the test driver, which models captures, events, host functions and
//! memory contents in stream order: a lazy mark recorded into a capture (this crate's, a
//! framework's on a lent stream, a buffer dropped in its own stream's capture), another thread's
//! capture, a host synchronisation taken for more than it covers, a failed `into_raw`, a
//! replayed peer copy, programmatic launches, captures begun elsewhere, and a private stream that
//! joins a capture begun elsewhere. Each failed before the model was written down.

use std::sync::{Mutex, MutexGuard, OnceLock, mpsc};
use std::time::{Duration, Instant};

use cuda_mock_driver::MockDriver;
use cuda_stream::ffi::{self, CUresult};
use cuda_stream::{
    CaptureMode, Context, DeviceBuffer, Error, GraphBuffer, LaunchConfig, Module, Stream,
    kernel_args, poll_pending_frees,
};
use cuda_stream_tests::gate;

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;

/// One kernel that takes a pointer (the mock runs nothing for it).
const PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry touch(
    .param .u64 touch_p
)
{
    ret;
}
"#;

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the tests, installs the mock (device 0 with memory pools, device 1 without) and
/// resets it. Both primary contexts stay retained for the whole process: the mock frees a
/// context's memory when its last retain goes, even under queued work.
fn mock() -> (MutexGuard<'static, ()>, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    static KEEP: OnceLock<(Context, Context)> = OnceLock::new();
    KEEP.get_or_init(|| {
        m.set_memory_pools(0, true);
        m.set_memory_pools(1, false);
        let ctxs = (Context::primary(0).unwrap(), Context::primary(1).unwrap());
        // These tests follow each free to the driver: no block is kept for reuse.
        cuda_stream::MemPool::default_for(&ctxs.0)
            .unwrap()
            .set_cache_limit(0);
        ctxs
    });
    for c in KEEP.get().into_iter().flat_map(|(a, b)| [a, b]) {
        c.synchronize().unwrap();
    }
    poll_pending_frees();
    m.reset();
    (guard, m)
}

/// Waits until the mock's worker has run everything queued.
fn idle(m: &MockDriver) {
    let start = Instant::now();
    while m.pending_host_fns() != 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "never idle");
        std::thread::yield_now();
    }
}

/// Waits until the live allocations are back to `live`: frees without pools are made at polls,
/// those of buffers a graph held once its user objects' destructors ran and queued them.
fn freed_back_to(m: &MockDriver, live: u64) {
    let start = Instant::now();
    loop {
        idle(m);
        cuda_stream::drain_deferred();
        poll_pending_frees();
        if m.live_allocations() == live {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} allocations live, {live} expected: one was leaked",
            m.live_allocations()
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn assert_clean(m: &MockDriver) {
    assert_eq!(
        (m.bad_destroys(), m.bad_uses(), m.orphans()),
        (0, 0, 0),
        "bad destroys, bad uses (work on freed memory), orphans"
    );
}

/// Arms the crate's hold point `point` (`cuda_stream::hold_point`) until the value drops, which
/// releases a held thread and disarms the point however the test ends: a point left armed would
/// hold a later test.
fn hold_at(point: &str) -> impl Drop {
    struct Release;
    impl Drop for Release {
        fn drop(&mut self) {
            cuda_stream::hold_point::release();
        }
    }
    cuda_stream::hold_point::hold_at(point);
    Release
}

/// Begins a capture on `s` with raw calls, as a framework would (thread-local mode).
fn raw_begin(s: ffi::CUstream) {
    let mode = ffi::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream.
    let rc = unsafe { cuda_stream_sys::cuStreamBeginCapture(s, mode) };
    assert_eq!(rc, SUCCESS);
}

/// Ends the raw capture of `s` and destroys its graph: the driver's answer.
fn raw_end(s: ffi::CUstream) -> CUresult {
    let mut graph = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the capture was begun on this thread.
    let rc = unsafe { cuda_stream_sys::cuStreamEndCapture(s, &mut graph) };
    if !graph.is_null() {
        // SAFETY: the capture handed the graph over.
        assert_eq!(unsafe { cuda_stream_sys::cuGraphDestroy(graph) }, SUCCESS);
    }
    rc
}

/// Hole 1: a buffer last used on `s` with no event (a lazy mark) and filled on another stream
/// while `s` is captured. The mark used to be recorded on `s` then: the record became a node of
/// the capture, the other stream joined it, the fill was captured and never ran, and the capture
/// ended `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`. The mark is settled before the capture begins.
#[test]
fn a_lazy_mark_is_settled_before_a_capture_of_its_stream_begins() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (mut s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let live = m.live_allocations();
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    x.fill(&s, 1).unwrap();
    let mut filled = None;
    let graph = s.capture(CaptureMode::ThreadLocal, |_cap| {
        filled = Some(x.fill(&t, 7));
        Ok(())
    });
    filled.expect("the closure ran").expect("the fill");
    let graph = graph.unwrap_or_else(|e| panic!("the capture of `s` broke: {e}"));
    assert_eq!(x.to_vec(&t).unwrap(), [7; 64], "the fill ran");
    // The buffer's later uses and its free still work.
    x.fill(&s, 3).unwrap();
    assert_eq!(x.to_vec(&t).unwrap(), [3; 64]);
    drop((graph, x));
    freed_back_to(m, live);
    assert_clean(m);
}

/// Hole 1, a framework's capture: a stream this crate created, lent with `raw()` (before or after
/// the buffer's last use on it) and captured with raw calls, as `torch.cuda.graph` does; a fill
/// of the buffer on another stream meanwhile must neither join that capture nor break it.
#[test]
fn a_stream_lent_to_a_framework_is_never_joined_to_its_capture() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    for taken_before_the_use in [false, true] {
        let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
        let live = m.live_allocations();
        let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
        let early = taken_before_the_use.then(|| s.raw());
        x.fill(&s, 1).unwrap();
        let raw = early.unwrap_or_else(|| s.raw());
        raw_begin(raw);
        let filled = x.fill(&t, 7);
        assert_eq!(
            raw_end(raw),
            SUCCESS,
            "the framework's capture (handle taken before the use: {taken_before_the_use})"
        );
        filled.unwrap();
        assert_eq!(x.to_vec(&t).unwrap(), [7; 64]);
        drop(x);
        freed_back_to(m, live);
        assert_clean(m);
    }
}

/// Hole 1, the free: a buffer whose last use is lazy on `s`, dropped inside the capture of `s`,
/// used to be freed on `s`, where the driver refuses to free memory from outside the capture
/// (`CUDA_ERROR_INVALID_VALUE`): it leaked. On both devices (with pools: a stream-ordered free;
/// without: events polled), and the capture must survive the drop.
#[test]
fn a_buffer_dropped_in_the_capture_of_its_own_stream_is_freed() {
    let (_g, m) = mock();
    for device in [0, 1] {
        let ctx = Context::primary(device).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let live = m.live_allocations();
        let x = DeviceBuffer::<u32>::alloc_on(&ctx, &s, 1 << 10).unwrap();
        x.fill(&s, 1).unwrap();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                drop(x);
                cap.launch_host_func(|| ())
            })
            .unwrap_or_else(|e| panic!("device {device}: the capture broke: {e}"));
        let exec = graph.instantiate().unwrap();
        exec.launch(&s).unwrap();
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        drop((exec, graph));
        freed_back_to(m, live);
        assert_clean(m);
    }
}

/// Hole 2: thread A captures `s`; thread B, which holds only the buffer (last written on `s`
/// before the capture), fills it on its own stream. That used to break A's capture
/// (`UNJOINED`) and lose B's fill.
#[test]
fn a_fill_on_another_thread_never_breaks_a_capture() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (mut s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let live = m.live_allocations();
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    x.fill(&s, 1).unwrap();
    let (to_b, at_b) = mpsc::channel::<()>();
    let (to_a, at_a) = mpsc::channel::<()>();
    let (graph, filled) = std::thread::scope(|sc| {
        let (x, t) = (&x, &t);
        let b = sc.spawn(move || {
            at_b.recv().unwrap();
            let r = x.fill(t, 7);
            to_a.send(()).unwrap();
            r
        });
        let graph = s.capture(CaptureMode::ThreadLocal, |_cap| {
            to_b.send(()).unwrap();
            at_a.recv().unwrap();
            Ok(())
        });
        (graph, b.join().unwrap())
    });
    filled.unwrap();
    let graph = graph.unwrap_or_else(|e| panic!("thread A's capture broke: {e}"));
    assert_eq!(x.to_vec(&t).unwrap(), [7; 64], "thread B's fill ran");
    drop((graph, x));
    freed_back_to(m, live);
    assert_clean(m);
}

/// Hole 3: `copy_from_host` synchronises its stream and then takes the buffer's uses on that
/// stream as complete; a fill another thread enqueued there while the synchronisation waited (and
/// still queued) was taken as complete too: a copy on another stream waited for nothing, and the
/// drop freed the memory under the fill (device 1: `cuMemFree`, which does not wait).
#[test]
fn a_host_synchronisation_covers_only_the_uses_recorded_before_it() {
    let (_g, m) = mock();
    let ctx = Context::primary(1).unwrap();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let live = m.live_allocations();
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 16).unwrap();
    let y = DeviceBuffer::<u32>::zeroed(&ctx, &t, 16).unwrap();
    s.synchronize().unwrap();
    t.synchronize().unwrap();
    let first = gate(&s);
    let host = [1u32; 16];
    let syncs = m.calls("cuStreamSynchronize");
    let (second, copied) = std::thread::scope(|sc| {
        let a = sc.spawn(|| x.copy_from_host(&s, &host));
        // Thread A is in its synchronisation (the copy behind `first`) once the call is counted:
        // the mock reads what it waits for under the same lock.
        let start = Instant::now();
        while m.calls("cuStreamSynchronize") == syncs {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "A never synchronised"
            );
            std::thread::yield_now();
        }
        let second = gate(&s);
        x.fill(&s, 7).unwrap();
        drop(first);
        (second, a.join().unwrap())
    });
    copied.unwrap();
    // The fill is still queued behind `second`: a use on `t` must wait for it.
    let waits = m.calls("cuStreamWaitEvent");
    y.copy_from(&t, &x).unwrap();
    assert!(
        m.calls("cuStreamWaitEvent") > waits,
        "the copy on `t` waits for the queued fill"
    );
    drop(x);
    drop(second);
    idle(m);
    assert_eq!(y.to_vec(&t).unwrap(), [7; 16]);
    drop(y);
    freed_back_to(m, live);
    assert_clean(m);
}

/// Hole 4: a failed `into_raw` (no event could be recorded after a use, or the wait for one
/// failed) used to hand the buffer back with no use recorded: its drop freed the memory at once,
/// under the fill still queued (device 1: `cuMemFree`).
#[test]
fn a_failed_into_raw_gives_the_buffer_back_with_every_use() {
    let (_g, m) = mock();
    let ctx = Context::primary(1).unwrap();
    for failed in ["cuEventRecord", "cuEventSynchronize"] {
        let s = ctx.new_stream().unwrap();
        let live = m.live_allocations();
        let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 16).unwrap();
        s.synchronize().unwrap();
        let held = gate(&s);
        x.fill(&s, 5).unwrap();
        m.fail(failed, 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
        let kept = x.into_raw().unwrap_err();
        let cause = std::error::Error::source(&kept).expect("the driver's error");
        assert_eq!(
            cause.to_string(),
            format!("{failed}: CUDA_ERROR_LAUNCH_FAILED")
        );
        let x = kept.into_buffer();
        let frees = m.calls("cuMemFree");
        drop(x);
        assert_eq!(
            m.calls("cuMemFree"),
            frees,
            "{failed}: not freed under the queued fill"
        );
        drop(held);
        freed_back_to(m, live);
        assert_clean(m);
    }
}

/// Hole 5: a peer copy into a buffer of context 1, captured on a stream of context 0 and
/// replayed there. The replay used to record the buffer's use with an event of context 1 on the
/// context-0 stream (`CUDA_ERROR_INVALID_HANDLE`): the launch returned an error although the
/// replay was enqueued, and a later use of the buffer waited for nothing.
#[test]
fn a_replayed_peer_copy_orders_and_records_its_remote_buffer() {
    let (_g, m) = mock();
    let (c0, c1) = (Context::primary(0).unwrap(), Context::primary(1).unwrap());
    let (mut cap0, s0) = (c0.new_stream().unwrap(), c0.new_stream().unwrap());
    let s1 = c1.new_stream().unwrap();
    let live = m.live_allocations();
    let x0 = DeviceBuffer::from_host(&c0, &s0, &[3u32; 64]).unwrap();
    let y1 = DeviceBuffer::<u32>::zeroed(&c1, &s1, 64).unwrap();
    let graph = cap0
        .capture(CaptureMode::ThreadLocal, |cap| y1.copy_from_peer(&cap, &x0))
        .unwrap();
    let exec = graph.instantiate().unwrap();
    for round in 1..=3u32 {
        y1.fill(&s1, round).unwrap();
        exec.launch(&s0)
            .unwrap_or_else(|e| panic!("round {round}: the replay: {e}"));
        let waits = m.calls("cuStreamWaitEvent");
        assert_eq!(y1.to_vec(&s1).unwrap(), [3; 64], "round {round}");
        assert!(
            m.calls("cuStreamWaitEvent") > waits,
            "round {round}: the read on context 1 waits for the replay"
        );
    }
    drop((exec, graph, x0, y1));
    s0.synchronize().unwrap();
    freed_back_to(m, live);
    assert_clean(m);
}

/// Hole 6, decided by contract: a launch with programmatic stream serialisation is ordered after
/// the earlier work on its stream by the stream alone, as any launch; no event is added between
/// it and the kernel before it (that would undo what the attribute is for). `Function::launch`'s
/// `# Safety` puts the rest on the kernel: it waits (`griddepcontrol.wait`) before touching what
/// the work before it uses, buffers passed as `read()` / `write()` included.
#[test]
fn a_programmatic_launch_is_ordered_by_its_stream_alone() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let touch = module.function("touch").unwrap();
    let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 16).unwrap();
    // SAFETY: `touch` takes one pointer and does nothing.
    unsafe { touch.launch(&s, LaunchConfig::new(1, 1), &kernel_args![x.write()]) }.unwrap();
    let before = (m.calls("cuEventRecord"), m.calls("cuStreamWaitEvent"));
    let pdl = LaunchConfig::new(1, 1).programmatic_serialization(true);
    // SAFETY: as above; it touches nothing, so waits for nothing.
    unsafe { touch.launch(&s, pdl, &kernel_args![x.write()]) }.unwrap();
    assert_eq!(
        (m.calls("cuEventRecord"), m.calls("cuStreamWaitEvent")),
        before,
        "nothing between the two kernels of one stream"
    );
    assert_eq!(m.calls("cuLaunchKernelEx"), 1);
    drop(x);
    s.synchronize().unwrap();
    assert_clean(m);
}

/// Hole 7, decided by refusal: a capture this crate did not begin (a framework's, on a stream
/// borrowed or reached through `in_capture`) has graphs launched where this crate cannot order
/// them against a buffer's other uses, so buffer operations there are refused and tie nothing;
/// `keep_alive_in` still ties a buffer (for raw work through `device_ptr`, whose ordering is that
/// unsafe code's promise), and graph buffers of the capture itself work.
#[test]
fn buffers_are_refused_in_captures_begun_elsewhere() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let owner = ctx.new_stream().unwrap();
    let raw = owner.raw();
    let live = m.live_allocations();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let touch = module.function("touch").unwrap();
    let mut buf = DeviceBuffer::<u32>::zeroed(&ctx, &owner, 16).unwrap();
    let out = DeviceBuffer::<u32>::zeroed(&ctx, &owner, 16).unwrap();
    owner.synchronize().unwrap();
    let objects = m.live_user_objects();
    let refused = |r: cuda_stream::Result<()>, what: &str| match r {
        Err(Error::Refused { reason, .. }) if reason.contains("begun elsewhere") => {}
        other => panic!("{what} in a capture begun elsewhere: {other:?}"),
    };
    raw_begin(raw);
    {
        // SAFETY: `owner` keeps the stream alive while the view is used.
        let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
        refused(buf.fill(&view, 1), "fill");
        refused(out.copy_from(&view, &buf), "copy_from");
        refused(
            owner.in_capture(|cap| buf.fill(&cap, 1)),
            "fill in in_capture",
        );
        // SAFETY: `touch` takes one pointer and does nothing.
        let launched =
            unsafe { touch.launch(&view, LaunchConfig::new(1, 1), &kernel_args![buf.write()]) };
        refused(launched, "a launch with write()");
        assert_eq!(m.live_user_objects(), objects, "nothing tied");
        assert!(!buf.is_held_by_graphs());
        view.in_capture(|cap| {
            let scratch = GraphBuffer::<u32>::zeroed(&ctx, cap, 16)?;
            scratch.fill(&cap, 2)
        })
        .expect("a graph buffer of the capture itself");
        buf.keep_alive_in(&view).expect("keep_alive_in ties");
        assert!(buf.is_held_by_graphs());
    }
    assert_eq!(raw_end(raw), SUCCESS, "the framework's capture");
    drop((buf, out));
    freed_back_to(m, live);
    assert_clean(m);
}

/// A private stream that waits on work captured elsewhere joins that capture, unseen: a buffer's
/// lazy mark on it cannot be settled until the capture ends. A use elsewhere is refused (it used
/// to record the mark into the capture and break it), and the buffer's drop is made once the
/// capture has ended.
#[test]
fn a_stream_that_joined_a_capture_begun_elsewhere_is_never_recorded_on() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let framework = ctx.new_stream().unwrap();
    let raw = framework.raw();
    let (j, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let live = m.live_allocations();
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &j, 16).unwrap();
    x.fill(&j, 1).unwrap();
    raw_begin(raw);
    j.wait_stream(&framework).unwrap(); // `j` joins the framework's capture
    match x.fill(&t, 7) {
        Err(Error::Refused { reason, .. }) if reason.contains("joined a capture") => {}
        other => panic!("a use waiting for a stream in a capture begun elsewhere: {other:?}"),
    }
    drop(x); // cannot be freed yet
    framework.wait_stream(&j).unwrap(); // joined back
    assert_eq!(raw_end(raw), SUCCESS, "the framework's capture");
    assert_eq!(m.live_allocations(), live + 1);
    // The next allocation (or poll) makes the free.
    freed_back_to(m, live);
    assert_clean(m);
}

/// A use nothing marks (its event could not be recorded) is covered by the context's completion
/// only. A use of the buffer on another stream while a capture runs used to synchronise the
/// context, which the driver refuses then, invalidating the capture: with the capture in the
/// buffer's context the use is now refused (no driver call) and the capture survives; with the
/// capture in another context the synchronisation is made, in the relaxed mode, and the use goes
/// ahead.
#[test]
fn a_use_covered_by_its_context_never_breaks_a_capture() {
    let (_g, m) = mock();
    for capture_device in [0, 1] {
        let ctx = Context::primary(0).unwrap();
        let live = m.live_allocations();
        let t = ctx.new_stream().unwrap();
        let x = DeviceBuffer::<u32>::zeroed(&ctx, &t, 64).unwrap();
        assert_eq!(x.to_vec(&t).unwrap(), [0; 64]); // the zeroing complete: nothing to wait for
        // A use on the legacy stream is marked by an event recorded after it: that record fails.
        m.fail("cuEventRecord", 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
        // The work is enqueued; its use is covered by the context's completion only.
        assert!(x.fill(&ctx.legacy_stream(), 1).is_err());
        m.clear_failures();
        let mut c = Context::primary(capture_device)
            .unwrap()
            .new_stream()
            .unwrap();
        let graph = c.capture(CaptureMode::ThreadLocal, |cap| {
            let r = x.fill(&t, 7);
            if capture_device == 0 {
                assert!(matches!(r, Err(Error::Refused { .. })), "{r:?}");
            } else {
                r.unwrap();
            }
            cap.launch_host_func(|| ())
        });
        graph.unwrap_or_else(|e| panic!("capture on device {capture_device} broke: {e}"));
        x.fill(&t, 7).unwrap();
        assert_eq!(x.to_vec(&t).unwrap(), [7; 64]);
        drop(x);
        freed_back_to(m, live);
        assert_clean(m);
    }
}

/// Hole 8: conflicting uses of a buffer from outside a capture on two forks of one capture were
/// not ordered in its graph, so every replay raced (the race detector saw it). The later use now
/// waits for the earlier one inside the graph: a replay reads and writes in the closure's order.
#[test]
fn conflicting_uses_on_two_forks_of_a_capture_are_ordered_in_its_graph() {
    let (_g, m) = mock();
    m.clear_races();
    let ctx = Context::primary(0).unwrap();
    let mut s = ctx.new_stream().unwrap();
    let live = m.live_allocations();
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    let y = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            cap.scope(|sc| {
                let (f1, f2) = (sc.fork()?, sc.fork()?);
                x.fill(&f1, 1)?; // a write on one fork
                y.copy_from(&f2, &x)?; // read on the other
                x.fill(&f2, 2)?; // written again there
                x.fill(&f1, 3) // and back on the first
            })
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    for _ in 0..3 {
        exec.launch(&s).unwrap();
    }
    assert_eq!(y.to_vec(&s).unwrap(), [1; 64]);
    assert_eq!(x.to_vec(&s).unwrap(), [3; 64]);
    idle(m);
    m.assert_no_races();
    drop((exec, graph, x, y));
    freed_back_to(m, live);
    assert_clean(m);
}

#[test]
fn a_repeated_fill_whose_stream_is_lent_meanwhile_is_marked_after_its_work() {
    // A fill that repeats the buffer's last use (its allocation's lazy write on `s`) takes the
    // hot path: no wait, no event. The filling thread is held once the use was found to repeat
    // and before the fill is enqueued (no driver call lies between), while this thread takes
    // `s`'s handle, which records the epoch's settling event now, before the fill. A later fill
    // on `t` waits for the old epoch: it must wait for the first fill itself.
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    let _held = hold_at("repeated use");
    std::thread::scope(|sc| {
        let filling = sc.spawn(|| x.fill(&s, 7).unwrap());
        cuda_stream::hold_point::wait_until_held("the fill never repeated its use");
        let _ = s.raw(); // the epoch ends: its settling event is recorded on `s` now
        cuda_stream::hold_point::release();
        filling.join().unwrap();
    });
    x.fill(&t, 1).unwrap();
    assert_eq!(x.to_vec(&t).unwrap(), [1; 64]);
    s.synchronize().unwrap();
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
    drop(x);
    assert_clean(m);
}

#[test]
fn an_allocation_on_a_stream_lent_meanwhile_is_never_recorded_in_its_capture() {
    // An allocation takes its stream's epoch from the thread's cache of the last one it
    // allocated on, with no lock of the map: it can find the epoch after another thread, taking
    // the handle, forgot the stream and found the epoch unheld. The lending thread is held there;
    // the allocation takes the epoch, a lazy write. Once the stream has left the crate a
    // framework captures it: a fill of the buffer on another stream must neither record the
    // allocation's mark inside that capture (joining it) nor break it.
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let live = m.live_allocations();
    // This thread's cache now holds `s`'s epoch, which nothing holds once the buffer is gone.
    drop(DeviceBuffer::<u32>::alloc_on(&ctx, &s, 64).unwrap());
    let _held = hold_at("unheld end");
    let (x, raw) = std::thread::scope(|sc| {
        let lending = sc.spawn(|| s.raw() as usize);
        cuda_stream::hold_point::wait_until_held("the handle was never taken");
        let x = DeviceBuffer::<u32>::alloc_on(&ctx, &s, 64).unwrap();
        cuda_stream::hold_point::release();
        (x, lending.join().unwrap() as ffi::CUstream)
    });
    raw_begin(raw);
    let filled = x.fill(&t, 7);
    assert_eq!(raw_end(raw), SUCCESS, "the framework's capture");
    if let Err(e) = &filled {
        panic!("the fill: {e}");
    }
    assert_eq!(x.to_vec(&t).unwrap(), [7; 64]);
    assert_eq!(m.races(), 0, "{:?}", m.race_reports());
    drop(x);
    freed_back_to(m, live);
    assert_clean(m);
}

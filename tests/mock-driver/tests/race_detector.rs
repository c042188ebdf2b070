//! The test driver's race detector, checked with sequences written raw against the driver
//! (`cuda_stream_sys` calls, nothing of `cuda-stream`): a conflicting pair of accesses that nothing
//! orders is reported, naming both operations, and the same pair ordered by an event, a
//! synchronisation (of the stream, the event or the context), a query that found the work done,
//! stream order or the legacy stream's implicit synchronisation is not; a free before a pending
//! access, a graph replay racing a copy, the branches of a graph, kernels' arguments, the host's
//! reads of page-locked memory and the accesses another library reports are checked as well.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Mutex;

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream_sys::*;

static LOCK: Mutex<()> = Mutex::new(());

const N: usize = 256;

#[track_caller]
fn ok(rc: CUresult) {
    assert_eq!(rc, CUresult::CUDA_SUCCESS);
}

/// The mock, reset, with device 0's primary context current on this thread.
fn setup() -> (Serialized, &'static MockDriver) {
    let m = MockDriver::global();
    let guard = m.serialize(&LOCK);
    // SAFETY: plain driver calls with valid out-pointers.
    unsafe {
        ok(cuInit(0));
        let mut ctx = null_mut();
        ok(cuDevicePrimaryCtxRetain(&mut ctx, 0));
        ok(cuCtxSetCurrent(ctx));
    }
    (guard, m)
}

fn stream(flags: u32) -> CUstream {
    let mut s = null_mut();
    // SAFETY: a valid out-pointer; a context is current.
    ok(unsafe { cuStreamCreate(&mut s, flags) });
    s
}

fn alloc() -> CUdeviceptr {
    let mut p = 0;
    // SAFETY: a valid out-pointer; a context is current.
    ok(unsafe { cuMemAlloc(&mut p, N) });
    p
}

fn event() -> CUevent {
    let mut e = null_mut();
    // SAFETY: a valid out-pointer; a context is current.
    ok(unsafe { cuEventCreate(&mut e, 2) });
    e
}

fn memset(p: CUdeviceptr, v: u32, s: CUstream) {
    // SAFETY: `p` holds N bytes.
    ok(unsafe { cuMemsetD32Async(p, v, N / 4, s) });
}

fn copy(dst: CUdeviceptr, src: CUdeviceptr, s: CUstream) {
    // SAFETY: both hold N bytes.
    ok(unsafe { cuMemcpyDtoDAsync(dst, src, N, s) });
}

fn record(e: CUevent, s: CUstream) {
    // SAFETY: live handles of one context.
    ok(unsafe { cuEventRecord(e, s) });
}

fn wait(s: CUstream, e: CUevent) {
    // SAFETY: live handles.
    ok(unsafe { cuStreamWaitEvent(s, e, 0) });
}

fn sync(s: CUstream) {
    // SAFETY: a live stream.
    ok(unsafe { cuStreamSynchronize(s) });
}

/// The races found, then forgotten (so the test's end does not fail on the ones it provoked).
fn take(m: &MockDriver) -> Vec<String> {
    let r = m.race_reports();
    assert_eq!(m.races(), r.len() as u64);
    m.clear_races();
    r
}

/// A write of a fresh `x` on `a`, then `between(a, b)`, then a copy of `x` into a fresh `y` on
/// `b`: the races found.
fn pair(m: &MockDriver, between: impl FnOnce(CUstream, CUstream)) -> Vec<String> {
    let (a, b) = (stream(1), stream(1));
    let (x, y) = (alloc(), alloc());
    memset(x, 7, a);
    between(a, b);
    copy(y, x, b);
    take(m)
}

#[test]
fn an_unordered_write_and_read_on_two_streams_is_a_race_naming_both() {
    let (_g, m) = setup();
    let (a, b) = (stream(1), stream(1));
    let (x, y) = (alloc(), alloc());
    memset(x, 7, a);
    copy(y, x, b);
    let r = take(m);
    assert_eq!(r.len(), 1, "{r:?}");
    let later = format!(
        "cuMemcpyDtoDAsync (read of [{x:#x}, {:#x}) on stream {:#x})",
        x + N as u64,
        b as usize
    );
    let earlier = format!(
        "cuMemsetD32Async (write of [{x:#x}, {:#x}) on stream {:#x})",
        x + N as u64,
        a as usize
    );
    assert_eq!(r[0], format!("{later} is not ordered after {earlier}"));
    // Write after write races: x written on a, now on b; then x read and y written on a, after
    // x's write and y's write on b: three races.
    memset(x, 8, b);
    copy(y, x, a);
    assert_eq!(take(m).len(), 3);
    // Two reads never race; a write after an unordered read does.
    let (p, q) = (alloc(), alloc());
    sync(a);
    sync(b);
    copy(p, x, a);
    copy(q, x, b);
    assert_eq!(take(m).len(), 0, "reads overlap");
    memset(x, 9, a);
    let r = take(m);
    assert_eq!(r.len(), 1, "the write races the read on b: {r:?}");
    assert!(
        r[0].contains("is not ordered after cuMemcpyDtoDAsync (read of"),
        "{r:?}"
    );
    sync(a);
}

#[test]
fn the_same_pair_ordered_by_an_event_is_no_race() {
    let (_g, m) = setup();
    let e = event();
    let r = pair(m, |a, b| {
        record(e, a);
        wait(b, e);
    });
    assert_eq!(r, Vec::<String>::new());
    // An event recorded before the write orders nothing.
    let (a, b) = (stream(1), stream(1));
    let (x, y) = (alloc(), alloc());
    record(e, a);
    memset(x, 8, a);
    wait(b, e);
    copy(y, x, b);
    assert_eq!(take(m).len(), 1);
    // A wait on an event of another stream neither.
    let r = pair(m, |_, b| {
        let c = stream(1);
        record(e, c);
        wait(b, e);
    });
    assert_eq!(r.len(), 1);
}

#[test]
fn the_same_pair_ordered_by_a_synchronisation_or_a_query_is_no_race() {
    let (_g, m) = setup();
    let e = event();
    assert_eq!(pair(m, |a, _| sync(a)).len(), 0, "stream synchronize");
    let r = pair(m, |a, _| {
        record(e, a);
        // SAFETY: a live event.
        ok(unsafe { cuEventSynchronize(e) });
    });
    assert_eq!(r.len(), 0, "event synchronize: {r:?}");
    // SAFETY: a context is current.
    let r = pair(m, |_, _| ok(unsafe { cuCtxSynchronize() }));
    assert_eq!(r.len(), 0, "context synchronize");
    let r = pair(m, |a, _| {
        // SAFETY: a live stream.
        while unsafe { cuStreamQuery(a) } != CUresult::CUDA_SUCCESS {}
    });
    assert_eq!(r.len(), 0, "a stream query that found the work done");
    let r = pair(m, |a, _| {
        record(e, a);
        // SAFETY: a live event.
        while unsafe { cuEventQuery(e) } != CUresult::CUDA_SUCCESS {}
    });
    assert_eq!(r.len(), 0, "an event query that found the work done");
    // A synchronisation of the other stream orders nothing.
    assert_eq!(pair(m, |_, b| sync(b)).len(), 1);
    // Nor does a query that found the work still running (a stream held by a host function).
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let r = pair(m, |a, _| {
        extern "C" fn hold(p: *mut c_void) {
            // SAFETY: `p` is the receiver boxed below, owned by this call.
            let rx = unsafe { Box::from_raw(p.cast::<std::sync::mpsc::Receiver<()>>()) };
            let _ = rx.recv();
        }
        let p = Box::into_raw(Box::new(rx)).cast();
        // SAFETY: `hold` takes the box it is given.
        ok(unsafe { cuLaunchHostFunc(a, Some(hold), p) });
        record(e, a);
        // SAFETY: live handles.
        assert_eq!(unsafe { cuEventQuery(e) }, CUresult::CUDA_ERROR_NOT_READY);
        // SAFETY: a live stream.
        assert_eq!(unsafe { cuStreamQuery(a) }, CUresult::CUDA_ERROR_NOT_READY);
    });
    drop(tx);
    assert_eq!(r.len(), 1);
}

#[test]
fn the_same_pair_in_stream_order_is_no_race() {
    let (_g, m) = setup();
    let a = stream(1);
    let (x, y) = (alloc(), alloc());
    memset(x, 7, a);
    copy(y, x, a);
    memset(x, 8, a);
    copy(x, y, a);
    assert_eq!(take(m).len(), 0);
    // Nor through another stream that waited: a waits for b, which waited for a.
    let e = event();
    let r = pair(m, |a, b| {
        let c = stream(1);
        record(e, a);
        wait(c, e);
        record(e, c);
        wait(b, e);
    });
    assert_eq!(r.len(), 0);
}

#[test]
fn the_legacy_stream_synchronises_with_blocking_streams_only() {
    let (_g, m) = setup();
    let legacy = 1 as CUstream;
    let (blocking, nonblocking) = (stream(0), stream(1));
    let (x, y) = (alloc(), alloc());
    memset(x, 7, blocking);
    copy(y, x, legacy);
    memset(y, 8, blocking);
    assert_eq!(take(m).len(), 0, "blocking stream and legacy stream");
    let (p, q) = (alloc(), alloc());
    memset(p, 9, nonblocking);
    copy(q, p, legacy);
    let r = take(m);
    assert_eq!(r.len(), 1, "a non-blocking stream does not: {r:?}");
    sync(legacy);
}

#[test]
fn a_free_before_a_pending_read_is_a_race() {
    let (_g, m) = setup();
    let (a, b) = (stream(1), stream(1));
    let (x, y) = (alloc(), alloc());
    copy(y, x, b);
    // SAFETY: `x` is a live allocation (the mock never touches freed memory).
    ok(unsafe { cuMemFree(x) });
    let r = take(m);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].starts_with("cuMemFree (free of"), "{r:?}");
    assert!(r[0].contains("cuMemcpyDtoDAsync (read of"), "{r:?}");
    // Stream-ordered: a free on another stream than the read, with nothing between them.
    let mut p = 0;
    // SAFETY: a valid out-pointer; device 0 has pools.
    ok(unsafe { cuMemAllocAsync(&mut p, N, a) });
    copy(y, p, a);
    // SAFETY: the allocation is live.
    ok(unsafe { cuMemFreeAsync(p, b) });
    let r = take(m);
    assert_eq!(
        r.len(),
        3,
        "y written on b and a; p allocated and read on a: {r:?}"
    );
    assert_eq!(
        r.iter()
            .filter(|r| r.starts_with("cuMemFreeAsync (free of"))
            .count(),
        2
    );
    // The free after a synchronisation is no race; a use after the free is one.
    let mut q = 0;
    // SAFETY: as above.
    ok(unsafe { cuMemAllocAsync(&mut q, N, a) });
    sync(b);
    copy(y, q, a);
    sync(a);
    // SAFETY: the allocation is live.
    ok(unsafe { cuMemFreeAsync(q, b) });
    assert_eq!(take(m).len(), 0);
    sync(a);
    sync(b);
}

#[test]
fn a_graph_replay_racing_a_copy_is_a_race() {
    let (_g, m) = setup();
    let (a, b, cap) = (stream(1), stream(1), stream(1));
    let (x, y, e) = (alloc(), alloc(), event());
    let mut graph = null_mut();
    let mut exec = null_mut();
    // SAFETY: live handles and valid out-pointers.
    unsafe {
        ok(cuStreamBeginCapture(
            cap,
            CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        ));
        memset(x, 5, cap);
        ok(cuStreamEndCapture(cap, &mut graph));
        ok(cuGraphInstantiate(&mut exec, graph, 0));
        ok(cuGraphLaunch(exec, a));
    }
    assert_eq!(take(m).len(), 0, "a capture runs nothing");
    copy(y, x, b);
    let r = take(m);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].contains("cuMemsetD32Async (write of"), "{r:?}");
    assert!(
        r[0].contains(&format!(
            "node 0 of graph exec {:#x} launched on stream {:#x}",
            exec as usize, a as usize
        )),
        "{r:?}"
    );
    // Ordered by an event after the launch: no race.
    record(e, a);
    wait(b, e);
    copy(y, x, b);
    assert_eq!(take(m).len(), 0);
    // A launch of the executable graph on another stream comes after its previous launch (the
    // driver orders the launches of one executable graph), but not after what b does.
    sync(b);
    // SAFETY: live handles.
    ok(unsafe { cuGraphLaunch(exec, a) });
    // SAFETY: live handles.
    ok(unsafe { cuGraphLaunch(exec, cap) });
    assert_eq!(take(m).len(), 0, "two launches of one executable graph");
    let z = alloc();
    copy(z, x, b);
    let r = take(m);
    assert_eq!(
        r.len(),
        1,
        "the copy on b and the replay on cap are unordered: {r:?}"
    );
    sync(b);
    sync(cap);
    // SAFETY: live handles, destroyed once.
    unsafe {
        ok(cuGraphExecDestroy(exec));
        ok(cuGraphDestroy(graph));
    }
}

#[test]
fn graph_branches_race_unless_joined_by_the_capture() {
    let (_g, m) = setup();
    let (cap, fork, run) = (stream(1), stream(1), stream(1));
    let x = alloc();
    let (fork_ev, join_ev) = (event(), event());
    let capture = |joined_before_second: bool| {
        let mut graph = null_mut();
        let mut exec = null_mut();
        // SAFETY: live handles and valid out-pointers.
        unsafe {
            ok(cuStreamBeginCapture(
                cap,
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            ));
            record(fork_ev, cap);
            wait(fork, fork_ev);
            memset(x, 1, fork);
            record(join_ev, fork);
            if joined_before_second {
                wait(cap, join_ev);
                memset(x, 2, cap);
            } else {
                memset(x, 2, cap);
                wait(cap, join_ev);
            }
            ok(cuStreamEndCapture(cap, &mut graph));
            ok(cuGraphInstantiate(&mut exec, graph, 0));
            ok(cuGraphLaunch(exec, run));
            ok(cuGraphLaunch(exec, run));
            sync(run);
            ok(cuGraphExecDestroy(exec));
            ok(cuGraphDestroy(graph));
        }
    };
    capture(true);
    assert_eq!(take(m).len(), 0);
    capture(false);
    let r = take(m);
    assert_eq!(r.len(), 2, "one race per launch: {r:?}");
}

#[test]
fn kernel_arguments_are_reads_and_writes_as_the_mock_runs_them() {
    let (_g, m) = setup();
    let ptx = concat!(
        ".version 7.0\n.target sm_50\n.address_size 64\n",
        ".visible .entry copy_u32(.param .u64 d, .param .u64 s) { ret; }\n",
        ".visible .entry other(.param .u64 p) { ret; }\n\0"
    );
    let mut module = null_mut();
    let (mut copy_fn, mut other_fn) = (null_mut(), null_mut());
    // SAFETY: NUL-terminated PTX, no options; valid out-pointers.
    unsafe {
        ok(cuModuleLoadDataEx(
            &mut module,
            ptx.as_ptr().cast(),
            0,
            null_mut(),
            null_mut(),
        ));
        ok(cuModuleGetFunction(
            &mut copy_fn,
            module,
            c"copy_u32".as_ptr(),
        ));
        ok(cuModuleGetFunction(
            &mut other_fn,
            module,
            c"other".as_ptr(),
        ));
    }
    #[allow(clippy::type_complexity)]
    let launch = |f: CUfunction, s: CUstream, args: &mut [*mut c_void]| {
        // SAFETY: one pointer per parameter, each to 8 readable bytes.
        ok(unsafe { cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args.as_mut_ptr(), null_mut()) });
    };
    let (a, b) = (stream(1), stream(1));
    let (mut x, mut y) = (alloc(), alloc());
    memset(x, 3, a);
    // copy_u32 reads 4 bytes of x and writes 4 of y.
    launch(copy_fn, b, &mut [(&raw mut y).cast(), (&raw mut x).cast()]);
    let r = take(m);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].starts_with(&format!("cuLaunchKernel (read of [{x:#x}, {:#x})", x + 4)),
        "{r:?}"
    );
    // A kernel the mock does not compute touches nothing it knows of.
    launch(other_fn, b, &mut [(&raw mut x).cast()]);
    assert_eq!(take(m).len(), 0);
    sync(a);
    sync(b);
    // SAFETY: the module is loaded, and unloaded once after its work.
    ok(unsafe { cuModuleUnload(module) });
}

#[test]
fn the_host_reading_page_locked_memory_is_ordered_by_synchronisation() {
    let (_g, m) = setup();
    let a = stream(1);
    let x = alloc();
    let mut h: *mut c_void = null_mut();
    let e = event();
    // SAFETY: valid out-pointers and sizes.
    unsafe {
        ok(cuMemHostAlloc(&mut h, N, 0));
        ok(cuMemcpyDtoHAsync(h, x, N, a));
    }
    assert!(m.host_access(h as u64, N, false));
    let r = take(m);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].starts_with("cuda_mock_host_access (read of"), "{r:?}");
    record(e, a);
    // SAFETY: a live event.
    ok(unsafe { cuEventSynchronize(e) });
    assert!(m.host_access(h as u64, N, false));
    assert_eq!(take(m).len(), 0);
    // The free of page-locked memory a copy still reads is a race too.
    // SAFETY: valid sizes; `h` is live and freed once.
    unsafe {
        ok(cuMemcpyHtoDAsync(x, h, N, a));
        ok(cuMemFreeHost(h));
    }
    let r = take(m);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].starts_with("cuMemFreeHost (free of"), "{r:?}");
    sync(a);
}

#[test]
fn accesses_another_library_reports_are_checked_in_stream_order_and_replayed() {
    let (_g, m) = setup();
    type Hook = unsafe extern "C" fn(
        CUstream,
        *const i8,
        usize,
        *const u64,
        *const usize,
        *const u8,
    ) -> CUresult;
    // SAFETY: the documented signature of `cuda_mock_stream_access`.
    let hook: Hook = unsafe { std::mem::transmute(m.stream_access_fn()) };
    let (a, b) = (stream(1), stream(1));
    let x = alloc();
    memset(x, 1, a);
    let (ptrs, lens, writes) = ([x], [N], [1u8]);
    // SAFETY: one entry each; a NUL-terminated name.
    let report = |s| unsafe {
        hook(
            s,
            c"ncclAllReduce".as_ptr(),
            1,
            ptrs.as_ptr(),
            lens.as_ptr(),
            writes.as_ptr(),
        )
    };
    ok(report(a));
    assert_eq!(take(m).len(), 0);
    ok(report(b));
    let r = take(m);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].starts_with("ncclAllReduce (write of"), "{r:?}");
    sync(a);
    sync(b);
}

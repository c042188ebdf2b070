//! Kernels, memsets and copies captured into graphs and replayed, on the GPU: on two forks of a
//! capture, with safe buffer operations whose buffers the graph keeps alive, in a capture begun
//! with raw calls on a borrowed stream, and from eight threads sharing one capture view.

use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cuda_stream::ffi::CUresult;
use cuda_stream::{CaptureMode, Context, DeviceBuffer, Stream, drain_deferred};
use cuda_stream_tests::{
    alone, bind, error_chain, gpu, ramp, raw_stream_create, raw_stream_destroy, saxpy,
    saxpy_module, sys,
};

/// Kernels on two forks of a capture, a memset before them and a copy and a host function after,
/// captured into a graph and replayed: each replay computes the same results (checked after each
/// of the first ten, with the output cleared between them), and 1,000 replays run the host
/// function 1,000 times.
///
/// Under compute-sanitizer the vectors are smaller (2^14 floats, not 2^20) and the replays fewer
/// (100): racecheck keeps host memory per thread of every replayed kernel, and at full size it
/// grew past 128 GiB in a minute and was killed (H100, driver 580).
#[test]
fn kernels_on_two_forks_and_a_copy_captured_into_a_graph_and_replayed() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let tool = cuda_stream_tests::sanitizer();
    let (n, more_replays): (usize, usize) = if tool.is_some() {
        (1 << 14, 90)
    } else {
        (1 << 20, 1000)
    };
    if let Some(tool) = &tool {
        println!(
            "under compute-sanitizer {tool}: {n} floats, {} replays",
            10 + more_replays
        );
    }
    let mut s = ctx.new_stream().unwrap();
    let m = saxpy_module(&ctx);
    let f = m.function("saxpy").unwrap();
    let host_x = ramp(n);
    let x = DeviceBuffer::from_host(&ctx, &s, &host_x).unwrap();
    let y = DeviceBuffer::<f32>::zeroed(&ctx, &s, n).unwrap();
    let z = DeviceBuffer::<f32>::zeroed(&ctx, &s, n).unwrap();
    let half = n / 2;
    let offset = (half * 4) as u64;
    let replays = Arc::new(AtomicUsize::new(0));
    let counter = replays.clone();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            // SAFETY: `y` holds n floats and outlives every launch of the graph.
            unsafe { cuda_stream::memset_d32_async(&cap, y.device_ptr(), 1f32.to_bits(), n) }?;
            cap.scope(|sc| {
                let (a, b) = (sc.fork()?, sc.fork()?);
                // SAFETY: each fork touches its own half of `x` and `y`, which outlive every
                // launch of the graph.
                unsafe {
                    saxpy(a, &f, half, 2.0, x.device_ptr(), y.device_ptr());
                    saxpy(
                        b,
                        &f,
                        n - half,
                        2.0,
                        x.device_ptr() + offset,
                        y.device_ptr() + offset,
                    );
                }
                Ok(())
            })?;
            // SAFETY: `z` and `y` hold n floats and outlive every launch of the graph.
            unsafe { cuda_stream::memcpy_dtod_async(&cap, z.device_ptr(), y.device_ptr(), 4 * n) }?;
            cap.launch_host_func(move || {
                counter.fetch_add(1, Ordering::Relaxed);
            })
        })
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    // A memset, two kernels, a copy and a host function; the forks' joins add no node.
    assert_eq!(graph.node_count().unwrap(), 5);
    assert_eq!(
        z.to_vec(&s).unwrap(),
        vec![0.0; n],
        "nothing ran during the capture"
    );
    let exec = graph.instantiate().unwrap();
    let expected: Vec<f32> = host_x.iter().map(|v| 2.0 * v + 1.0).collect();
    for replay in 1..=10 {
        z.fill(&s, 0.0).unwrap();
        exec.launch(&s).unwrap();
        let got = z.to_vec(&s).unwrap();
        let wrong = (0..n).filter(|&i| got[i] != expected[i]).count();
        assert_eq!(wrong, 0, "replay {replay}: {wrong} of {n} results wrong");
    }
    let w = std::time::Instant::now();
    for _ in 0..more_replays {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    println!(
        "{more_replays} replays of 2 kernels, a memset and a copy over {n} floats: {:?}",
        w.elapsed()
    );
    assert_eq!(replays.load(Ordering::Relaxed), 10 + more_replays);
    assert_eq!(z.to_vec(&s).unwrap(), expected);
}

/// The allocation that holds `ptr` (`cuMemGetAddressRange`): its base and size, or `None` when no
/// live allocation holds it.
fn allocation_at(ctx: &Context, ptr: u64) -> Option<(u64, usize)> {
    let _bound = bind(ctx);
    let (mut base, mut size) = (0, 0);
    // SAFETY: valid out-pointers; the context is current.
    let rc = unsafe { sys::cuMemGetAddressRange(&mut base, &mut size, ptr) };
    (rc == CUresult::CUDA_SUCCESS).then_some((base, size))
}

/// The allocation of a buffer as the driver reports it: its base is the buffer's address, and
/// it holds at least the buffer's bytes.
fn allocation_of<T: cuda_stream::DeviceCopy>(buf: &DeviceBuffer<T>) -> (u64, usize) {
    let found = allocation_at(buf.context(), buf.device_ptr());
    match found {
        Some((base, size)) if base == buf.device_ptr() && size >= buf.byte_len() => (base, size),
        other => panic!("cuMemGetAddressRange of a live buffer: {other:?}"),
    }
}

/// Drains the frees that graphs' user-object destructors queued (they run on a driver thread,
/// where no CUDA call is made), until the allocation `(base, size)` is gone; panics after 10 s.
fn wait_until_freed(ctx: &Context, (ptr, bytes): (u64, usize)) {
    let start = std::time::Instant::now();
    loop {
        drain_deferred();
        // A free made on a stream of the crate's may leave the block kept there for reuse.
        ctx.release_cached();
        // Another test's allocation could land at the same address, but not with this
        // (deliberately odd) size as well.
        match allocation_at(ctx, ptr) {
            Some((base, size)) if base == ptr && size == bytes => {}
            _ => return,
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the allocation at {ptr:#x} was never freed after its graphs went"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The safe buffer operations inside a capture: `tmp.fill`, a kernel on `x` and `tmp` (both tied
/// with `keep_alive_in`) and `out.copy_from(&tmp)` are captured, `tmp` and `x` dropped before the
/// graph is instantiated, and every replay still computes `out = 2 x + 3` from memory the graph
/// keeps allocated; once the graph and its executable graph are gone, the memory is freed.
#[test]
fn safe_fills_copies_and_a_kernel_captured_keep_their_buffers_alive_across_replays() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    // An odd size, so that `wait_until_freed` recognises the allocation.
    const N: usize = (1 << 20) + 7;
    const REPLAYS: usize = 20;
    let mut s = ctx.new_stream().unwrap();
    let m = saxpy_module(&ctx);
    let f = m.function("saxpy").unwrap();
    let host_x = ramp(N);
    let x = DeviceBuffer::from_host(&ctx, &s, &host_x).unwrap();
    let tmp = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let out = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
    let (tmp_alloc, x_alloc) = (allocation_of(&tmp), allocation_of(&x));
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            tmp.fill(&cap, 3.0)?;
            x.keep_alive_in(&cap)?;
            tmp.keep_alive_in(&cap)?;
            // SAFETY: `x` and `tmp` hold N floats; their free waits for the stream's work, and
            // the graph keeps them allocated for its launches (tied just above).
            unsafe { saxpy(cap, &f, N, 2.0, x.device_ptr(), tmp.device_ptr()) };
            out.copy_from(&cap, &tmp)
        })
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    assert_eq!(graph.node_count().unwrap(), 3);
    drop((tmp, x));
    drain_deferred();
    assert_eq!(
        allocation_at(&ctx, tmp_alloc.0),
        Some(tmp_alloc),
        "dropped, but the graph holds it"
    );
    let exec = graph.instantiate().unwrap();
    drop(graph);
    drain_deferred();
    assert_eq!(
        allocation_at(&ctx, tmp_alloc.0),
        Some(tmp_alloc),
        "the executable graph holds it"
    );
    assert_eq!(allocation_at(&ctx, x_alloc.0), Some(x_alloc));
    let expected: Vec<f32> = host_x.iter().map(|v| 2.0 * v + 3.0).collect();
    for replay in 1..=REPLAYS {
        out.fill(&s, 0.0).unwrap();
        exec.launch(&s).unwrap();
        let got = out.to_vec(&s).unwrap();
        let wrong = (0..N).filter(|&i| got[i] != expected[i]).count();
        assert_eq!(wrong, 0, "replay {replay}: {wrong} of {N} results wrong");
    }
    assert!(out.is_held_by_graphs());
    drop(exec);
    wait_until_freed(&ctx, tmp_alloc);
    wait_until_freed(&ctx, x_alloc);
    let start = std::time::Instant::now();
    while out.is_held_by_graphs() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "`out` still held"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    println!(
        "{REPLAYS} replays of a captured fill, kernel and copy over {N} floats, from buffers \
         dropped after the capture: all results checked; their memory freed with the graph"
    );
}

/// A capture begun with raw calls on a borrowed stream (as PyTorch's `torch.cuda.graph` begins
/// one): `fill` and `copy_from` on the borrowed view are refused (the graphs of a capture this
/// crate did not begin are launched where it cannot order them against the buffers' other uses),
/// and `keep_alive_in` ties a buffer to the graph for raw work, which every replay finds, also
/// after the buffer is dropped.
#[test]
fn a_buffer_in_a_capture_begun_raw_is_refused_or_kept_by_the_graph() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    const N: usize = (1 << 16) + 3;
    let s = ctx.new_stream().unwrap();
    let raw = raw_stream_create(&ctx, sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0);
    let src = DeviceBuffer::<u32>::alloc(&ctx, N).unwrap();
    let out = DeviceBuffer::<u32>::zeroed(&ctx, &s, N).unwrap();
    s.synchronize().unwrap();
    let src_alloc = allocation_of(&src);
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream.
    let rc = unsafe { sys::cuStreamBeginCapture(raw, mode) };
    assert_eq!(rc, CUresult::CUDA_SUCCESS, "cuStreamBeginCapture");
    let captured = {
        let owner = ();
        // SAFETY: `raw` lives until it is destroyed below, after the view is gone.
        let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
        for r in [src.fill(&view, 1), out.copy_from(&view, &src)] {
            assert!(
                matches!(r, Err(cuda_stream::Error::Refused { .. })),
                "a buffer used in a capture begun elsewhere: {r:?}"
            );
        }
        assert!(!src.is_held_by_graphs() && !out.is_held_by_graphs());
        src.keep_alive_in(&view).and_then(|()| {
            // SAFETY: `src` holds N words and is tied to the capture's graph just above.
            unsafe { cuda_stream::memset_d32_async(&view, src.device_ptr(), 0xc0ff_ee00, N) }
        })
    };
    let mut graph = ptr::null_mut();
    // SAFETY: a valid out-pointer; the capture was begun on this thread.
    let rc = unsafe { sys::cuStreamEndCapture(raw, &mut graph) };
    captured.unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    assert_eq!(rc, CUresult::CUDA_SUCCESS, "cuStreamEndCapture");
    // SAFETY: the capture handed the graph over; its work is of `ctx`, and the memory its node
    // uses is held by the graph's user object.
    let graph = unsafe { cuda_stream::Graph::from_raw(graph, &ctx) }.unwrap();
    assert!(src.is_held_by_graphs());
    let ptr = src.device_ptr();
    drop(src);
    let exec = graph.instantiate().unwrap();
    drop(graph);
    drain_deferred();
    assert_eq!(
        allocation_at(&ctx, src_alloc.0),
        Some(src_alloc),
        "the executable graph holds it"
    );
    for replay in 1..=5 {
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(
            cuda_stream_tests::read_u32s(&ctx, ptr, N),
            vec![0xc0ff_ee00; N],
            "replay {replay}"
        );
    }
    drop(exec);
    wait_until_freed(&ctx, src_alloc);
    drop(out);
    // SAFETY: created above; no view of it is left.
    unsafe { raw_stream_destroy(raw) };
}

/// Eight scoped threads share one capture view and each enqueue into it, over and over: host
/// functions, kept values, an external event's record and wait, and a fill of a buffer of their
/// own. Each of these gives the capture's graph a user object (`cuGraphRetainUserObject`), which
/// the crate serialises per graph (the driver does not synchronise graph objects). Two replays
/// run every host function twice and leave every buffer filled.
#[test]
fn eight_threads_enqueue_into_one_capture() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 25;
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let mut s = ctx.new_stream().unwrap();
    let event = Arc::new(ctx.new_event(Default::default()).unwrap());
    let bufs: Vec<DeviceBuffer<u32>> = (0..THREADS)
        .map(|_| DeviceBuffer::zeroed(&ctx, &s, 1024).unwrap())
        .collect();
    s.synchronize().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let kept = Arc::new(());
    let graph = s
        .capture(CaptureMode::Relaxed, |cap| {
            std::thread::scope(|scope| {
                let workers: Vec<_> = bufs
                    .iter()
                    .enumerate()
                    .map(|(t, buf)| {
                        let (ran, kept, event) = (&ran, &kept, &event);
                        scope.spawn(move || -> cuda_stream::Result<()> {
                            for _ in 0..ROUNDS {
                                let ran = ran.clone();
                                cap.launch_host_func(move || {
                                    ran.fetch_add(1, Ordering::SeqCst);
                                })?;
                                cap.keep_alive(kept.clone())?;
                                cap.record_external(event)?;
                                cap.wait_event(event)?;
                                buf.fill(&cap, t as u32 + 1)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .try_for_each(|w| w.join().expect("a worker panicked"))
            })
        })
        .unwrap_or_else(|e| panic!("the capture: {}", error_chain(&e)));
    let exec = graph.instantiate().unwrap();
    drop(graph);
    exec.launch(&s).unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 2 * THREADS * ROUNDS);
    for (t, buf) in bufs.iter().enumerate() {
        assert!(buf.to_vec(&s).unwrap().iter().all(|&v| v == t as u32 + 1));
    }
    drop(exec);
    println!(
        "{THREADS} threads x {ROUNDS} rounds into one capture: {} host function runs",
        ran.load(Ordering::SeqCst)
    );
}

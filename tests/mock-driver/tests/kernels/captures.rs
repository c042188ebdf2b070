//! Kernels and buffers in captures: launches, memsets and copies captured and replayed, and the
//! buffers a capture uses kept allocated until the last graph that holds them goes.

use cuda_mock_driver::MockDriver;
use cuda_stream::ffi::CUresult;
use cuda_stream::{
    CaptureMode, Context, DeviceBuffer, Error, LaunchConfig, Module, Stream, deferred_pending,
    drain_deferred, kernel_args,
};

use super::{PTX, SUCCESS, assert_clean, idle, isolated, mock};

/// Kernels, memsets and copies on a capture view (and on its forks) become graph nodes: nothing
/// runs during the capture, and every launch of the executable graph runs them again in the
/// captured order, copies to the host included.
#[test]
fn launches_memsets_and_copies_are_captured_and_replayed() {
    let (_lock, m) = mock();
    isolated(|| {
        const N: usize = 1000;
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let module = Module::from_ptx(&ctx, PTX).unwrap();
        let saxpy = module.function("saxpy").unwrap();
        let host_x: Vec<f32> = (0..N).map(|i| i as f32).collect();
        let x = DeviceBuffer::from_host(&ctx, &s, &host_x).unwrap();
        let y = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
        let z = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
        let mut out = vec![0f32; N];
        let half = N / 2;
        let run = m.kernels_run();
        // `y[at..at + n] = a * x[at..at + n] + y[at..at + n]` on `stream`.
        let saxpy_on = |stream: &cuda_stream::CaptureStream<'_>, n: usize, a: f32, at: usize| {
            let n32 = n as u32;
            let at = (at * 4) as u64;
            let (px, py) = (x.device_ptr() + at, y.device_ptr() + at);
            let config = LaunchConfig::for_elements(n32, 128);
            // SAFETY: saxpy takes (u32, f32, pointer, pointer); `x` and `y` hold N floats and
            // outlive the graph's launches.
            unsafe { saxpy.launch(stream, config, &kernel_args![n32, a, px, py]) }
        };
        let out_ptr = out.as_mut_ptr();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                // y = 1, then each fork computes y = 2x + y on its half, then z = y and the host
                // gets a copy of z.
                // SAFETY: `y` holds N floats and outlives the graph's launches.
                unsafe { cuda_stream::memset_d32_async(&cap, y.device_ptr(), 1f32.to_bits(), N) }?;
                cap.scope(|sc| {
                    let (a, b) = (sc.fork()?, sc.fork()?);
                    saxpy_on(&a, half, 2.0, 0)?;
                    saxpy_on(&b, N - half, 2.0, half)
                })?;
                // SAFETY: `z`, `y` hold N floats and `out` N floats; all outlive the launches,
                // and `out` is read only after the stream is synchronised.
                unsafe {
                    cuda_stream::memcpy_dtod_async(&cap, z.device_ptr(), y.device_ptr(), 4 * N)?;
                    cuda_stream::memcpy_dtoh_async(
                        &cap,
                        std::slice::from_raw_parts_mut(out_ptr, N),
                        z.device_ptr(),
                    )
                }
            })
            .unwrap();
        assert_eq!(m.kernels_run(), run, "nothing ran during the capture");
        assert_eq!(graph.node_count().unwrap(), 5);
        assert_eq!(z.to_vec(&s).unwrap(), vec![0.0; N]);
        let exec = graph.instantiate().unwrap();
        for replay in 1..=3 {
            z.fill(&s, 0.0).unwrap();
            exec.launch(&s).unwrap();
            s.synchronize().unwrap();
            assert_eq!(m.kernels_run(), run + 2 * replay);
            let expected: Vec<f32> = host_x.iter().map(|v| 2.0 * v + 1.0).collect();
            assert_eq!(z.to_vec(&s).unwrap(), expected, "replay {replay}");
            assert_eq!(out, expected, "replay {replay}: the copy to the host");
        }
        assert_clean(m);
    });
}

/// Waits until the mock's worker has run everything queued (host functions, user-object
/// destructors), then makes the frees that a destructor queued (no CUDA call is made on a driver
/// thread) on this, an ordinary, thread, and waits for the stream-ordered frees that enqueues.
fn settle_graph_frees(m: &MockDriver) {
    idle(m);
    drain_deferred();
    assert_eq!(deferred_pending(), 0);
    idle(m);
}

/// `fill` and `copy_from` on a capture view become graph nodes, and the graph keeps both buffers'
/// memory: a buffer dropped after the capture stays allocated while the graph or an executable
/// graph made from it exists, every replay finds it (no use of freed memory), and it is freed
/// once the last of them is gone.
#[test]
fn captured_fills_and_copies_keep_their_buffers_until_the_last_graph_goes() {
    let (_lock, m) = mock();
    isolated(|| {
        const N: usize = 1024;
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let base = m.live_allocations();
        let out = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
        let tmp = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
        let (objects, frees) = (m.live_user_objects(), m.calls("cuMemFreeAsync"));
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                tmp.fill(&cap, 3.0)?;
                out.copy_from(&cap, &tmp)
            })
            .unwrap();
        assert_eq!(graph.node_count().unwrap(), 2);
        assert_eq!(m.live_user_objects(), objects + 2, "one per operation");
        assert!(tmp.is_held_by_graphs() && out.is_held_by_graphs());
        assert_eq!(out.to_vec(&s).unwrap(), vec![0.0; N], "captured, not run");

        drop(tmp);
        assert_eq!(m.live_allocations(), base + 2, "the graph holds `tmp`");
        let exec = graph.instantiate().unwrap();
        drop(graph);
        settle_graph_frees(m);
        assert_eq!(
            m.live_allocations(),
            base + 2,
            "the executable graph holds `tmp`"
        );
        assert_eq!(m.calls("cuMemFreeAsync"), frees);
        for replay in 1..=3 {
            out.fill(&s, 0.0).unwrap();
            exec.launch(&s).unwrap();
            assert_eq!(out.to_vec(&s).unwrap(), vec![3.0; N], "replay {replay}");
        }

        // While a graph holds it, `out` cannot be handed over raw: it comes back unchanged.
        let kept = out.into_raw().unwrap_err();
        assert!(kept.is_held_by_graphs());
        assert_eq!(kept.to_string(), "a graph still holds the buffer's memory");
        let out = kept.into_buffer();
        assert_eq!(out.len(), N);
        drop(exec);
        settle_graph_frees(m);
        assert_eq!(m.live_user_objects(), objects);
        assert_eq!(
            m.live_allocations(),
            base + 1,
            "`tmp` freed with the last graph"
        );
        assert_eq!(m.calls("cuMemFreeAsync"), frees + 1);
        assert!(!out.is_held_by_graphs());
        let (ptr, len) = out.into_raw().expect("no graph holds it any more");
        assert_eq!(len, N);
        {
            let _bound = ctx.bind().unwrap();
            // SAFETY: pool memory handed over by `into_raw` just above, with no work pending.
            let rc = unsafe { cuda_stream_sys::cuMemFreeAsync(ptr, s.raw()) };
            assert_eq!(rc, SUCCESS);
        }
        s.synchronize().unwrap();
        assert_eq!(m.live_allocations(), base);
        assert_eq!(
            m.host_fn_api_calls(),
            0,
            "no CUDA call on the driver's thread"
        );
        assert_clean(m);
    });
}

/// `free` of a buffer a graph holds gives up the buffer's share and answers `Ok` at once; the
/// memory is freed when the graph goes. A buffer dropped inside the capture that tied it is not
/// freed there (the driver would refuse the wait during the capture): the graph frees it.
#[test]
fn a_buffer_freed_or_dropped_while_a_graph_holds_it_is_freed_by_the_graph() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let base = m.live_allocations();
        let a = DeviceBuffer::<u8>::alloc(&ctx, 64).unwrap();
        let b = DeviceBuffer::<u16>::alloc(&ctx, 32).unwrap();
        let (syncs, frees) = (m.calls("cuCtxSynchronize"), m.calls("cuMemFreeAsync"));
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                a.fill(&cap, 0x5a)?;
                b.fill(&cap, 0x0102)?;
                drop(b); // tied above: the graph frees it
                Ok(())
            })
            .unwrap();
        assert_eq!(
            m.calls("cuCtxSynchronize"),
            syncs,
            "no wait during the capture"
        );
        a.free().unwrap();
        assert_eq!(m.live_allocations(), base + 2);
        assert_eq!(m.calls("cuMemFreeAsync"), frees);
        let exec = graph.instantiate().unwrap();
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        drop((graph, exec));
        settle_graph_frees(m);
        assert_eq!(m.live_allocations(), base);
        assert_eq!(m.calls("cuMemFreeAsync"), frees + 2);
        assert_clean(m);
    });
}

/// A kernel launched into a capture uses buffers the crate cannot see: `keep_alive_in` ties them
/// to the graph (and does nothing but ask outside a capture); `CaptureStream::keep_alive` keeps
/// any value, such as the module, for as long.
#[test]
fn keep_alive_in_ties_a_kernels_buffers_and_keep_alive_any_value() {
    let (_lock, m) = mock();
    isolated(|| {
        const N: usize = 256;
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let base = (m.live_allocations(), m.live_modules());
        let module = std::sync::Arc::new(Module::from_ptx(&ctx, PTX).unwrap());
        let host_x: Vec<f32> = (0..N).map(|i| i as f32).collect();
        let x = DeviceBuffer::from_host(&ctx, &s, &host_x).unwrap();
        let y = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
        let z = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();

        // Outside a capture: one `cuStreamIsCapturing`, nothing tied.
        let (asks, infos, objects) = (
            m.calls("cuStreamIsCapturing"),
            m.calls("cuStreamGetCaptureInfo_v3"),
            m.live_user_objects(),
        );
        x.keep_alive_in(&s).unwrap();
        z.fill(&s, 0.0).unwrap();
        assert_eq!(m.calls("cuStreamIsCapturing"), asks + 2);
        assert_eq!(
            m.calls("cuStreamGetCaptureInfo_v3"),
            infos,
            "no more on the hot path"
        );
        assert_eq!(m.live_user_objects(), objects);
        assert!(!x.is_held_by_graphs());
        let s1 = Context::primary(1).unwrap().new_stream().unwrap();
        assert!(matches!(
            x.keep_alive_in(&s1),
            Err(Error::ContextMismatch { .. })
        ));

        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                let saxpy = module.function("saxpy")?;
                cap.keep_alive(module.clone())?;
                x.keep_alive_in(&cap)?;
                y.keep_alive_in(&cap)?;
                y.fill(&cap, 1.0)?;
                let n = N as u32;
                // SAFETY: saxpy takes (u32, f32, pointer, pointer); `x` and `y` hold N floats
                // and are tied to the graph above, as is the module.
                unsafe {
                    saxpy.launch(
                        &cap,
                        LaunchConfig::for_elements(n, 64),
                        &kernel_args![n, 2.0f32, x.device_ptr(), y.device_ptr()],
                    )
                }?;
                z.copy_from(&cap, &y)
            })
            .unwrap();
        assert_eq!(m.live_user_objects(), objects + 5);
        drop((x, y));
        let module = std::sync::Arc::into_inner(module);
        assert!(module.is_none(), "the graph holds the module");
        let exec = graph.instantiate().unwrap();
        drop(graph);
        let expected: Vec<f32> = host_x.iter().map(|v| 2.0 * v + 1.0).collect();
        for replay in 1..=2 {
            z.fill(&s, 0.0).unwrap();
            exec.launch(&s).unwrap();
            assert_eq!(z.to_vec(&s).unwrap(), expected, "replay {replay}");
        }
        assert_eq!(m.live_allocations(), base.0 + 3);
        drop(exec);
        settle_graph_frees(m);
        assert_eq!(m.live_user_objects(), objects);
        assert_eq!(
            (m.live_allocations(), m.live_modules()),
            (base.0 + 1, base.1),
            "`x`, `y` and the module went with the last graph"
        );
        drop(z);
        idle(m);
        assert_eq!(m.live_allocations(), base.0, "`z` freed in stream order");
        assert_clean(m);
    });
}

/// Begins a capture on `s` with raw calls, as a framework would (thread-local mode).
fn raw_begin(s: cuda_stream::ffi::CUstream) {
    let mode = cuda_stream::ffi::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream.
    let rc = unsafe { cuda_stream_sys::cuStreamBeginCapture(s, mode) };
    assert_eq!(rc, SUCCESS);
}

/// Ends the raw capture of `s`: the driver's answer and the graph (null on failure).
fn raw_end(s: cuda_stream::ffi::CUstream) -> (CUresult, cuda_stream::ffi::CUgraph) {
    let mut graph = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the capture was begun on this thread.
    let rc = unsafe { cuda_stream_sys::cuStreamEndCapture(s, &mut graph) };
    (rc, graph)
}

/// On a stream borrowed in a capture that other code began (as PyTorch's `torch.cuda.graph`
/// does), `fill` and `copy_from` are refused and tie nothing: its graphs are launched where this
/// crate cannot order them against the buffers' other uses (the ordering model in
/// `cuda-stream/src/memory/use_tracking`). `keep_alive_in` ties a buffer for raw work, which the
/// graph's replays find; an invalidated capture is an error, and ties nothing.
#[test]
fn fills_on_a_borrowed_stream_in_a_capture_begun_raw_are_refused() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let owner = ctx.new_stream().unwrap();
        let raw = owner.raw();
        let base = m.live_allocations();
        let buf = DeviceBuffer::<u32>::alloc(&ctx, 16).unwrap();
        let out = DeviceBuffer::<u32>::zeroed(&ctx, &owner, 16).unwrap();
        owner.synchronize().unwrap();
        let objects = m.live_user_objects();
        let ptr = buf.device_ptr();

        raw_begin(raw);
        {
            // SAFETY: `owner` keeps the stream alive while the view is used.
            let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
            for r in [buf.fill(&view, 0xdead_beef), out.copy_from(&view, &buf)] {
                match r {
                    Err(Error::Refused { reason, .. }) => {
                        assert!(reason.contains("begun elsewhere"), "{reason}")
                    }
                    other => panic!("a buffer used in a capture begun elsewhere: {other:?}"),
                }
            }
            assert_eq!(m.live_user_objects(), objects, "nothing tied");
            buf.keep_alive_in(&view).unwrap();
            // SAFETY: `buf` holds 16 words and is tied to the capture's graph just above.
            unsafe { cuda_stream::memset_d32_async(&view, ptr, 0xdead_beef, 16) }.unwrap();
            assert_eq!(m.live_user_objects(), objects + 1);
        }
        let (rc, graph) = raw_end(raw);
        assert_eq!(rc, SUCCESS);
        // SAFETY: the capture handed the graph over; its work is of `ctx`, and the memory its
        // node uses is held by the graph's user object.
        let graph = unsafe { cuda_stream::Graph::from_raw(graph, &ctx) }.unwrap();
        drop(buf);
        let exec = graph.instantiate().unwrap();
        drop(graph);
        exec.launch(&owner).unwrap();
        owner.synchronize().unwrap();
        assert_eq!(
            m.read_memory(ptr, 64).unwrap(),
            0xdead_beef_u32.to_ne_bytes().repeat(16),
            "the replay found the buffer the graph holds"
        );
        drop(exec);
        settle_graph_frees(m);
        assert_eq!(m.live_allocations(), base + 1);

        // An invalidated capture (a stream callback is unsupported in one) stays an error.
        raw_begin(raw);
        {
            // SAFETY: as above.
            let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
            assert!(view.add_callback(|_| ()).is_err());
            match out.fill(&view, 1) {
                Err(Error::NotCapturing {
                    status: cuda_stream::CaptureStatus::Invalidated { .. },
                }) => {}
                other => panic!("a fill into an invalidated capture: {other:?}"),
            }
            assert!(matches!(
                out.copy_from(&view, &out),
                Err(Error::NotCapturing { .. })
            ));
            assert!(matches!(
                out.keep_alive_in(&view),
                Err(Error::NotCapturing { .. })
            ));
            assert_eq!(m.live_user_objects(), objects, "nothing tied");
        }
        let (rc, graph) = raw_end(raw);
        assert_eq!(rc, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert!(graph.is_null());
        assert!(!out.is_held_by_graphs());
        drop(out);
        idle(m);
        assert_eq!(m.live_allocations(), base);
        assert_clean(m);
    });
}

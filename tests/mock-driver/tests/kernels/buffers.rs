//! Device buffers: the bytes memsets and copies leave in (host-backed) device memory, the raw
//! memset and memcpy functions on any stream, what the safe operations refuse (other contexts,
//! captures), and buffers moved between raw pointers and owners.

use std::sync::mpsc;
use std::time::Duration;

use cuda_mock_driver::MockDriver;
use cuda_stream::ffi::CUresult;
use cuda_stream::{CaptureMode, Context, DeviceBuffer, Error, Stream, current_context_raw};

use super::{SUCCESS, assert_clean, gate, idle, isolated, mock};

#[test]
fn buffers_hold_what_memsets_and_copies_write() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let allocations = m.live_allocations();

        let a = DeviceBuffer::<u32>::zeroed(&ctx, &s, 5).unwrap();
        assert_eq!((a.len(), a.byte_len(), a.is_empty()), (5, 20, false));
        assert_eq!(a.context(), &ctx);
        assert_eq!(m.live_allocations(), allocations + 1);
        s.synchronize().unwrap();
        assert_eq!(m.read_memory(a.device_ptr(), 20), Some(vec![0; 20]));

        a.fill(&s, 0x0102_0304).unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [0x0102_0304; 5]);
        let b = DeviceBuffer::from_host(&ctx, &s, &[1u32, 2, 3, 4, 5]).unwrap();
        a.copy_from(&s, &b).unwrap();
        let mut host = [0u32; 5];
        a.copy_to_host(&s, &mut host).unwrap();
        assert_eq!(host, [1, 2, 3, 4, 5]);
        a.copy_from_host(&s, &[9, 8, 7, 6, 5]).unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [9, 8, 7, 6, 5]);
        a.copy_from(&s, &a).unwrap();
        assert_eq!(
            a.to_vec(&s).unwrap(),
            [9, 8, 7, 6, 5],
            "a copy onto itself is a no-op"
        );

        // Fills pick the widest memset the value allows.
        let (d8, d16, d32) = ("cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async");
        let count = |m: &MockDriver| (m.calls(d8), m.calls(d16), m.calls(d32));
        let bytes = DeviceBuffer::<u8>::alloc(&ctx, 7).unwrap();
        let before = count(m);
        bytes.fill(&s, 0xab).unwrap();
        assert_eq!(count(m), (before.0 + 1, before.1, before.2), "7 bytes: D8");
        assert_eq!(bytes.to_vec(&s).unwrap(), [0xab; 7]);
        let halves = DeviceBuffer::<u16>::alloc(&ctx, 3).unwrap();
        halves.fill(&s, 0xbeef).unwrap();
        assert_eq!(halves.to_vec(&s).unwrap(), [0xbeef; 3]);
        let doubles = DeviceBuffer::<f64>::alloc(&ctx, 4).unwrap();
        let before = count(m);
        doubles.fill(&s, 0.0).unwrap();
        assert_eq!(count(m), (before.0, before.1, before.2 + 1), "zero: D32");
        assert_eq!(doubles.to_vec(&s).unwrap(), [0.0; 4]);
        let err = doubles.fill(&s, 0.5).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert_eq!(
            count(m),
            (before.0, before.1, before.2 + 1),
            "refused first"
        );
        let pairs = DeviceBuffer::<[u8; 2]>::alloc(&ctx, 3).unwrap();
        pairs.fill(&s, [1, 2]).unwrap();
        assert_eq!(pairs.to_vec(&s).unwrap(), [[1, 2]; 3]);

        // Lengths must match.
        let err = a.copy_from_host(&s, &[1, 2]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::LengthMismatch {
                    expected: 5,
                    actual: 2
                }
            ),
            "{err:?}"
        );
        assert!(matches!(
            a.copy_to_host(&s, &mut [0; 6]),
            Err(Error::LengthMismatch {
                expected: 5,
                actual: 6
            })
        ));
        let short = DeviceBuffer::<u32>::alloc(&ctx, 4).unwrap();
        assert!(matches!(
            a.copy_from(&s, &short),
            Err(Error::LengthMismatch { .. })
        ));

        // An empty buffer allocates nothing.
        let allocs = |m: &MockDriver| (m.calls("cuMemAllocFromPoolAsync"), m.calls("cuMemAlloc"));
        let before = allocs(m);
        let empty = DeviceBuffer::<u32>::from_host(&ctx, &s, &[]).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.device_ptr(), 0);
        assert_eq!(empty.to_vec(&s).unwrap(), Vec::<u32>::new());
        empty.fill(&s, 1).unwrap();
        assert_eq!(allocs(m), before);
        drop(empty);

        // Too big: refused here, or by the driver: from the pool on device 0, by `cuMemAlloc` on
        // device 1, which has no pools.
        assert!(matches!(
            DeviceBuffer::<u64>::alloc(&ctx, usize::MAX / 2),
            Err(Error::InvalidArgument { .. })
        ));
        let err = DeviceBuffer::<u8>::alloc(&ctx, 2 << 30).unwrap_err();
        assert_eq!(err.call(), Some("cuMemAllocFromPoolAsync"));
        assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        let ctx1 = Context::primary(1).unwrap();
        let err = DeviceBuffer::<u8>::alloc(&ctx1, 2 << 30).unwrap_err();
        assert_eq!(err.call(), Some("cuMemAlloc"));
        assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY));

        drop((a, b, bytes, halves, doubles, pairs, short));
        idle(m); // the frees are enqueued on streams
        assert_eq!(m.live_allocations(), allocations);
        assert_clean(m);
    });
}

#[test]
fn the_raw_functions_move_bytes_on_any_stream() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let buf = DeviceBuffer::<u8>::zeroed(&ctx, &ctx.legacy_stream(), 64).unwrap();
        let p = buf.device_ptr();
        for s in [
            ctx.legacy_stream(),
            ctx.per_thread_stream(),
            ctx.null_stream(),
        ] {
            assert!(current_context_raw().unwrap().is_null());
            // SAFETY: every range lies inside `buf`, which outlives the synchronised work; the
            // host slices live until the stream is synchronised.
            unsafe {
                cuda_stream::memset_d8_async(&s, p, 0x11, 64).unwrap();
                cuda_stream::memset_d16_async(&s, p + 8, 0x2233, 4).unwrap();
                cuda_stream::memset_d32_async(&s, p + 16, 0x4455_6677, 2).unwrap();
                cuda_stream::memcpy_dtod_async(&s, p + 32, p, 24).unwrap();
                cuda_stream::memcpy_htod_async(&s, p + 56, &[0xa0u8, 0xa1, 0xa2]).unwrap();
                let mut out = [0u16; 32];
                cuda_stream::memcpy_dtoh_async(&s, &mut out, p).unwrap();
                s.synchronize().unwrap();
                let bytes: Vec<u8> = out.iter().flat_map(|w| w.to_ne_bytes()).collect();
                let mut expected = vec![0x11u8; 8];
                expected.extend([0x33, 0x22].repeat(4));
                expected.extend([0x77, 0x66, 0x55, 0x44].repeat(2));
                expected.extend(vec![0x11; 8]);
                expected.extend(expected[..24].to_vec());
                expected.extend([0xa0, 0xa1, 0xa2, 0x11, 0x11, 0x11, 0x11, 0x11]);
                assert_eq!(bytes, expected);
            }
            assert!(current_context_raw().unwrap().is_null(), "left unbound");
        }
        // A misaligned D32 memset and a range past the end are the driver's refusals.
        // SAFETY: refused by the mock, which checks every range.
        let err = unsafe { cuda_stream::memset_d32_async(&ctx.legacy_stream(), p + 2, 0, 1) }
            .unwrap_err();
        assert_eq!(err.call(), Some("cuMemsetD32Async"));
        // SAFETY: as above.
        let err =
            unsafe { cuda_stream::memset_d8_async(&ctx.legacy_stream(), p, 0, 65) }.unwrap_err();
        assert_eq!(err.call(), Some("cuMemsetD8Async"));
        assert_eq!(m.bad_uses(), 1, "the mock counts a range past the end");
        m.reset();

        // The async buffer copies: the caller waits before touching the host slices.
        let s = ctx.new_stream().unwrap();
        let mut back = [0u8; 64];
        // SAFETY: the slices are untouched until the stream is synchronised.
        unsafe {
            buf.copy_from_host_async(&s, &[5u8; 64]).unwrap();
            buf.copy_to_host_async(&s, &mut back).unwrap();
        }
        s.synchronize().unwrap();
        assert_eq!(back, [5; 64]);
        assert_clean(m);
    });
}

#[test]
fn safe_buffer_operations_refuse_other_contexts_and_captures() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let ctx1 = Context::primary(1).unwrap();
        let s = ctx.new_stream().unwrap();
        let s1 = ctx1.new_stream().unwrap();
        let a = DeviceBuffer::<u32>::zeroed(&ctx, &s, 4).unwrap();
        let b1 = DeviceBuffer::<u32>::zeroed(&ctx1, &s1, 4).unwrap();
        let mismatch = |r: cuda_stream::Result<()>| {
            assert!(matches!(r, Err(Error::ContextMismatch { .. })), "{r:?}");
        };
        mismatch(a.fill(&s1, 1));
        mismatch(a.fill(&ctx1.legacy_stream(), 1));
        mismatch(a.copy_from(&s, &b1));
        mismatch(a.copy_from_host(&s1, &[0; 4]));
        mismatch(a.copy_to_host(&s1, &mut [0; 4]));
        mismatch(a.to_vec(&s1).map(drop));
        // SAFETY: refused before anything is enqueued.
        unsafe {
            mismatch(a.copy_from_host_async(&s1, &[0; 4]));
            mismatch(a.copy_to_host_async(&s1, &mut [0; 4]));
        }
        mismatch(DeviceBuffer::<u32>::zeroed(&ctx, &s1, 4).map(drop));
        mismatch(DeviceBuffer::<u32>::from_host(&ctx, &s1, &[1]).map(drop));

        // A stream that is capturing a graph: the safe operations that allocate or wait for the
        // stream refuse it before enqueueing anything; those that take a plain stream cannot be
        // given the capture view at all, but could get another view of the same stream.
        // (`fill` and `copy_from` work in a capture: see the tests below.)
        let allocations = m.live_allocations();
        let syncs = m.calls("cuCtxSynchronize");
        let frees = m.calls("cuMemFreeAsync");
        let memsets = m.calls("cuMemsetD32Async");
        let capturing = |r: cuda_stream::Result<()>, what: &str| match r {
            Err(Error::Capturing { op }) => assert_eq!(op, what),
            other => panic!("{what}: {other:?}"),
        };
        let mut s = s;
        let raw = s.raw();
        let token = ();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                // `zeroed` and `from_host` allocate through `alloc_on`, which names itself.
                capturing(
                    DeviceBuffer::<u32>::alloc_on(&ctx, &cap, 4).map(drop),
                    "DeviceBuffer::alloc_on",
                );
                capturing(
                    DeviceBuffer::<u32>::zeroed(&ctx, &cap, 4).map(drop),
                    "DeviceBuffer::alloc_on",
                );
                // SAFETY: `s`'s handle, alive during its capture.
                let view = unsafe { Stream::borrow_raw(raw, &token) }.unwrap();
                capturing(
                    a.copy_from_host(&view, &[0; 4]),
                    "DeviceBuffer::copy_from_host",
                );
                capturing(a.to_vec(&view).map(drop), "DeviceBuffer::copy_to_host");
                capturing(
                    DeviceBuffer::<u32>::from_host(&ctx, &view, &[1]).map(drop),
                    "DeviceBuffer::alloc_on",
                );
                let err = DeviceBuffer::<u32>::zeroed(&ctx, &cap, 4).unwrap_err();
                assert_eq!(
                    err.to_string(),
                    "DeviceBuffer::alloc_on cannot be recorded into a graph capture (it allocates \
                     or waits for the stream)"
                );
                assert_eq!(m.live_allocations(), allocations, "nothing was allocated");
                assert_eq!(m.calls("cuCtxSynchronize"), syncs, "nor waited for");
                assert_eq!(m.calls("cuMemFreeAsync"), frees, "nor freed");
                assert_eq!(m.calls("cuMemsetD32Async"), memsets);
                // The raw functions record into a capture: their caller keeps the memory alive.
                // SAFETY: `a` outlives the graph's launches below.
                unsafe { cuda_stream::memset_d32_async(&cap, a.device_ptr(), 9, 4) }
            })
            .unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [0; 4], "captured, not run");
        let exec = graph.instantiate().unwrap();
        exec.launch(&s).unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [9; 4], "run by the graph's launch");
        a.fill(&s, 2).unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [2; 4]);
        assert_clean(m);
    });
}

/// `into_raw` waits on the host for the buffer's recorded uses, then hands the memory over
/// (pool memory included: the caller frees it with `cuMemFreeAsync`); `from_raw` takes
/// `cuMemAlloc` memory back. A free the driver refuses leaves the memory allocated (leaked, never
/// freed under work) and is the driver's error.
#[test]
fn buffers_move_between_raw_and_owned() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let allocations = m.live_allocations();

        // Device 0 has pools: the memory handed over is pool memory, freed in stream order.
        let buf = DeviceBuffer::from_host(&ctx, &s, &[1.5f32, 2.5]).unwrap();
        let held = gate(&s);
        buf.fill(&s, 0.5).unwrap();
        let (handed_tx, handed_rx) = mpsc::channel();
        let (ptr, len) = std::thread::scope(|scope| {
            let handing = scope.spawn(move || {
                let raw = buf.into_raw().expect("no graph holds it");
                handed_tx.send(()).unwrap();
                raw
            });
            let early = handed_rx.recv_timeout(Duration::from_millis(100)).is_ok();
            drop(held);
            let raw = handing.join().unwrap();
            assert!(!early, "handed over while the fill was queued");
            raw
        });
        assert!(s.query().unwrap(), "the fill ran before the hand-over");
        assert_eq!(len, 2);
        assert_eq!(
            m.live_allocations(),
            allocations + 1,
            "handed over, not freed"
        );
        assert_eq!(
            m.read_memory(ptr, 8),
            Some([0.5f32.to_ne_bytes(); 2].concat())
        );
        {
            let _bound = ctx.bind().unwrap();
            // SAFETY: handed over by `into_raw` with no work pending; freed once.
            let rc = unsafe { cuda_stream_sys::cuMemFreeAsync(ptr, s.raw()) };
            assert_eq!(rc, SUCCESS);
        }
        s.synchronize().unwrap();
        assert_eq!(m.live_allocations(), allocations);

        // Device 1 has none: `cuMemAlloc` memory goes out and comes back.
        let ctx1 = Context::primary(1).unwrap();
        let s1 = ctx1.new_stream().unwrap();
        let allocations1 = m.live_allocations();
        let buf = DeviceBuffer::from_host(&ctx1, &s1, &[1.5f32, 2.5]).unwrap();
        let (ptr, len) = buf.into_raw().expect("no graph holds it");
        assert_eq!(m.live_allocations(), allocations1 + 1);
        // SAFETY: handed over by `into_raw` just above, from a device without pools.
        let back = unsafe { DeviceBuffer::<f32>::from_raw(&ctx1, ptr, len) };
        assert_eq!(back.to_vec(&s1).unwrap(), [1.5, 2.5]);
        assert!(back.pool().is_none());
        back.free().unwrap();
        assert_eq!(m.live_allocations(), allocations1);
        assert_eq!(
            cuda_stream::pending_frees(),
            0,
            "its uses were done: freed at once"
        );

        // A refused free leaves the memory allocated: `cuMemFreeAsync` with pools, `cuMemFree`
        // without.
        let buf = DeviceBuffer::<f32>::alloc(&ctx, 2).unwrap();
        m.fail("cuMemFreeAsync", 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
        let err = buf.free().unwrap_err();
        assert_eq!(err.call(), Some("cuMemFreeAsync"));
        assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_LAUNCH_FAILED));
        let buf = DeviceBuffer::<f32>::alloc(&ctx1, 2).unwrap();
        m.fail("cuMemFree", 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
        let err = buf.free().unwrap_err();
        assert_eq!(err.call(), Some("cuMemFree"));
        assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_LAUNCH_FAILED));
        assert_eq!(
            m.live_allocations(),
            allocations + 2,
            "leaked, not freed under work"
        );
        assert_eq!(
            (m.calls("cuMemFreeAsync"), m.calls("cuMemFree")),
            (2, 2),
            "each refused once, nothing retried"
        );
        assert_clean(m);
    });
}

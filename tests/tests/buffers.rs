//! Device buffers (`DeviceBuffer`) on the GPU: memsets and copies that round-trip, drops of a
//! buffer that return at once (the free ordered after the work using it), and of a module that
//! wait for its work, also when made inside a host function (queued, then made on an ordinary
//! thread).

use std::sync::mpsc;
use std::time::Duration;

use cuda_stream::{
    DeviceBuffer, Error, LaunchConfig, Module, deferred_failed, drain_deferred, kernel_args,
};
use cuda_stream_tests::{Window, alongside_others, error_chain, gpu, saxpy_module};

const SPIN: Duration = Duration::from_millis(200);

#[test]
fn buffers_round_trip_through_memsets_and_copies() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let s = ctx.new_stream().unwrap();
    let a = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1000).unwrap();
    assert_eq!(a.to_vec(&s).unwrap(), vec![0; 1000]);
    a.fill(&s, 0xdead_beef).unwrap();
    assert_eq!(a.to_vec(&s).unwrap(), vec![0xdead_beef; 1000]);
    let host: Vec<u32> = (0..1000).collect();
    let b = DeviceBuffer::from_host(&ctx, &s, &host).unwrap();
    a.copy_from(&s, &b).unwrap();
    let mut back = vec![0u32; 1000];
    a.copy_to_host(&s, &mut back).unwrap();
    assert_eq!(back, host);
    a.copy_from_host(&s, &vec![7; 1000]).unwrap();
    assert_eq!(a.to_vec(&s).unwrap(), vec![7; 1000]);

    let bytes = DeviceBuffer::<u8>::alloc(&ctx, 333).unwrap();
    bytes.fill(&s, 0x5a).unwrap();
    assert_eq!(bytes.to_vec(&s).unwrap(), vec![0x5a; 333]);
    let halves = DeviceBuffer::<u16>::alloc(&ctx, 333).unwrap();
    halves.fill(&s, 0x1234).unwrap();
    assert_eq!(halves.to_vec(&s).unwrap(), vec![0x1234; 333]);
    let doubles = DeviceBuffer::<f64>::alloc(&ctx, 100).unwrap();
    doubles.fill(&s, 0.0).unwrap();
    assert_eq!(doubles.to_vec(&s).unwrap(), vec![0.0; 100]);

    // The raw functions at offsets inside a buffer.
    let raw = DeviceBuffer::<u8>::zeroed(&ctx, &s, 64).unwrap();
    let p = raw.device_ptr();
    let mut out = [0u8; 64];
    // SAFETY: every range lies inside `raw`, which outlives the work; the host slices are
    // untouched until the stream is synchronised.
    unsafe {
        cuda_stream::memset_d8_async(&s, p, 0x11, 16).unwrap();
        cuda_stream::memset_d16_async(&s, p + 16, 0x2233, 8).unwrap();
        cuda_stream::memset_d32_async(&s, p + 32, 0x4455_6677, 4).unwrap();
        cuda_stream::memcpy_dtod_async(&s, p + 48, p, 8).unwrap();
        cuda_stream::memcpy_htod_async(&s, p + 56, &[1u8, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        cuda_stream::memcpy_dtoh_async(&s, &mut out, p).unwrap();
    }
    s.synchronize().unwrap();
    let mut expected = vec![0x11u8; 16];
    expected.extend([0x33, 0x22].repeat(8));
    expected.extend([0x77, 0x66, 0x55, 0x44].repeat(4));
    expected.extend([0x11; 8]);
    expected.extend([1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(out.to_vec(), expected);

    // The async buffer copies, waited for by hand.
    let mut back = vec![0u32; 1000];
    // SAFETY: the host slices are untouched until the stream is synchronised.
    unsafe {
        a.copy_from_host_async(&s, &host).unwrap();
        a.copy_to_host_async(&s, &mut back).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(back, host);
}

#[test]
fn dropping_a_buffer_returns_at_once_and_a_module_waits_for_its_work() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let s = ctx.new_stream().unwrap();
    // A late store into the buffer, recorded as a write: the drop returns at once, and the free
    // runs on the stream after the store (memcheck, in the sanitizer runs, sees no store to
    // freed memory).
    let m = Module::from_ptx(&ctx, &cuda_stream_tests::ptx_source())
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let store = m.function("store_after_spin").unwrap();
    let mut buf = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1).unwrap();
    let ns = SPIN.as_nanos() as u64;
    // SAFETY: store_after_spin(u32 *p, u32 value, u64 ns) writes p[0] only.
    unsafe {
        store.launch(
            &s,
            LaunchConfig::new(1, 1),
            &kernel_args![buf.write(), 7u32, ns],
        )
    }
    .unwrap();
    drop(buf);
    assert!(
        !s.query().unwrap(),
        "the drop waited for the kernel writing the buffer"
    );
    s.synchronize().unwrap();
    drop(m);

    // A kernel of the module still running: the unload waits for it.
    let m = Module::from_ptx(&ctx, &cuda_stream_tests::ptx_source())
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let spin = m.function("spin").unwrap();
    let ns = SPIN.as_nanos() as u64;
    let w = Window::start(SPIN);
    // SAFETY: `spin` takes one u64 (nanoseconds) and touches no memory.
    unsafe { spin.launch(&s, LaunchConfig::new(1, 1), &kernel_args![ns]) }.unwrap();
    drop(m);
    assert!(
        s.query().unwrap(),
        "the unload returned before the kernel finished"
    );
    println!("module drop waited {:?}", w.elapsed());
}

/// No CUDA call inside a host function, on the real driver: a buffer and a module dropped there,
/// and a buffer freed there, are freed later on an ordinary thread, and still only after their
/// context's work: a kernel on another stream that writes the dropped buffer is still running
/// when the host function drops it, and the drain waits for it.
#[test]
fn a_buffer_and_a_module_dropped_inside_a_host_function_are_freed_later() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let kernels = Module::from_ptx(&ctx, &cuda_stream_tests::ptx_source())
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let store = kernels.function("store_after_spin").unwrap();
    let mut buf = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1).unwrap();
    let freed = DeviceBuffer::<u8>::alloc(&ctx, 64).unwrap();
    let m = saxpy_module(&ctx);
    s.synchronize().unwrap();
    let failed = deferred_failed();
    // `t` writes the buffer late (a recorded write); `s`'s host function drops it meanwhile.
    let w = Window::start(SPIN);
    let ns = SPIN.as_nanos() as u64;
    // SAFETY: store_after_spin(u32 *p, u32 value, u64 ns) writes p[0] only.
    unsafe {
        store.launch(
            &t,
            LaunchConfig::new(1, 1),
            &kernel_args![buf.write(), 7u32, ns],
        )
    }
    .unwrap();
    let (tx, rx) = mpsc::channel();
    s.launch_host_func(move || {
        drop(m);
        drop(buf);
        let _ = tx.send(freed.free());
    })
    .unwrap();
    let r = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the host function ran");
    assert!(
        matches!(
            r,
            Err(Error::InHostFunction {
                call: "cuMemFreeAsync" | "cuMemFree"
            })
        ),
        "{r:?}"
    );
    // Whoever drains (this call, or a creation in another test of this process), the module's
    // unload waits for the context's work, and the buffer's free is ordered after the kernel
    // on `t` (its recorded write); a drain returns after any drain in progress.
    drain_deferred();
    assert!(
        t.query().unwrap(),
        "the deferred unload returned before the context's work finished"
    );
    drop(kernels);
    assert_eq!(
        deferred_failed(),
        failed,
        "a deferred free or unload failed"
    );
    println!("the deferred frees waited {:?}", w.elapsed());
}

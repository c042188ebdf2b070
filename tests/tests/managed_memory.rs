//! Managed memory (`ManagedBuffer`) on the GPU: written by the host, prefetched, transformed by
//! a typed kernel (reading one managed buffer, writing another through `as_device_mut`), and
//! read back by the host, which waits for the kernel: 200 rounds with new values, every value
//! checked (no stale read); advice accepted by the driver; refused in a capture.

use cuda_stream::{CaptureMode, DeviceBuffer, LaunchConfig, ManagedBuffer, MemAdvice, MemLocation};
use cuda_stream_tests::{alongside_others, error_chain, gpu, saxpy_module};

#[test]
fn managed_memory_read_by_the_host_after_a_kernel_wrote_it() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let module = saxpy_module(&ctx);
    let saxpy = module
        .function("saxpy")
        .unwrap()
        .typed::<(u32, f32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()
        .unwrap();
    let n = 1 << 20;
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let mut x =
        ManagedBuffer::<f32>::zeroed(&ctx, n).unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let mut y = ManagedBuffer::<f32>::zeroed(&ctx, n).unwrap();
    x.advise(MemAdvice::ReadMostly(true)).unwrap();
    y.advise(MemAdvice::PreferredLocation(Some(MemLocation::Device(
        ctx.device(),
    ))))
    .unwrap();
    y.advise(MemAdvice::AccessedBy(MemLocation::Host, true))
        .unwrap();
    for round in 0..200u32 {
        for (i, v) in x.as_mut_slice().unwrap().iter_mut().enumerate() {
            *v = (i % 512) as f32 + round as f32;
        }
        if round % 2 == 0 {
            x.prefetch_to_device(&s).unwrap();
        }
        y.fill(&t, 1.0).unwrap();
        // y = 3 x + 1 on s, after the fill on t (a recorded write of y).
        // SAFETY: saxpy reads x[..n] and writes y[..n].
        unsafe {
            saxpy.launch(
                &s,
                LaunchConfig::for_elements(n as u32, 256),
                (n as u32, 3.0, &x, y.as_device_mut()),
            )
        }
        .unwrap();
        if round % 3 == 0 {
            y.prefetch_to_host(&t).unwrap();
        }
        // The host waits for the kernel (and the prefetch) before it reads.
        let got = y.as_slice().unwrap();
        for (i, &v) in got.iter().enumerate() {
            assert_eq!(
                v,
                3.0 * ((i % 512) as f32 + round as f32) + 1.0,
                "round {round}, value {i}"
            );
        }
    }
    let mut s2 = ctx.new_stream().unwrap();
    let refused = s2.capture(CaptureMode::ThreadLocal, |cap| y.fill(&cap, 0.0));
    assert!(
        matches!(refused, Err(cuda_stream::Error::Refused { .. })),
        "{refused:?}"
    );
    println!(
        "managed: 200 rounds of 4 MiB written by the host, by a kernel, read by the host, no stale value"
    );
}

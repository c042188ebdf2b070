//! The caller's host memory page-locked for a scope (`RegisteredHost::scope`) on the GPU:
//! uploaded, transformed by a typed kernel on another stream, downloaded into the same memory
//! and checked, 200 rounds with new values each (no stale read); a copy still running when the
//! closure returns is waited for before the scope gives the memory back; memory page-locked
//! already (a `PinnedHostBuffer`'s) is the driver's `CUDA_ERROR_INVALID_VALUE`.

use std::time::Duration;

use cuda_stream::{DeviceBuffer, LaunchConfig, PinnedHostBuffer, RegisteredHost};
use cuda_stream_tests::{Kernels, alongside_others, error_chain, gpu, saxpy_module};

#[test]
fn registered_memory_copied_both_ways_for_200_rounds() {
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
    let x = DeviceBuffer::<f32>::zeroed(&ctx, &s, n).unwrap();
    let mut y = DeviceBuffer::<f32>::zeroed(&ctx, &s, n).unwrap();
    let mut data = vec![0.0f32; n];
    for round in 0..200u32 {
        for (i, v) in data.iter_mut().enumerate() {
            *v = (i % 1000) as f32 + round as f32;
        }
        RegisteredHost::scope(&ctx, &mut data, |host| {
            x.copy_from_pinned(&s, host)?;
            y.fill(&t, 1.0)?;
            // y = 2 x + 1 on t: after the upload on s (a recorded write of x).
            // SAFETY: saxpy reads x[..n] and writes y[..n].
            unsafe {
                saxpy.launch(
                    &t,
                    LaunchConfig::for_elements(n as u32, 256),
                    (n as u32, 2.0, &x, &mut y),
                )
            }?;
            // Into the same host memory on s: after the kernel (a recorded write of y) and after
            // the upload that read it.
            y.copy_to_pinned(&s, host)?;
            Ok::<(), cuda_stream::Error>(())
        })
        .unwrap()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
        for (i, &v) in data.iter().enumerate() {
            let want = 2.0 * ((i % 1000) as f32 + round as f32) + 1.0;
            assert_eq!(v, want, "round {round}, value {i}");
        }
    }
    println!("registered: 200 rounds of 4 MiB up, through a kernel, and down, no stale value");
}

#[test]
fn the_scope_waits_for_a_late_copy_and_refuses_pinned_memory() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let dev = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1 << 16).unwrap();
    let mut data = vec![0u32; 1 << 16];
    RegisteredHost::scope(&ctx, &mut data, |host| {
        // A 50 ms kernel, then the fill and the download: all still running at the return.
        k.spin(&s, Duration::from_millis(50));
        dev.fill(&s, 77).unwrap();
        dev.copy_to_pinned(&s, host).unwrap();
        assert!(host.copies_in_flight() >= 1);
    })
    .unwrap();
    assert!(
        data.iter().all(|&v| v == 77),
        "the scope waited for the download"
    );
    let mut pinned = PinnedHostBuffer::<u32>::zeroed(&ctx, 16).unwrap();
    let err = RegisteredHost::scope(&ctx, pinned.as_mut_slice().unwrap(), |_| ()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cuMemHostRegister: CUDA_ERROR_INVALID_VALUE"
    );
}

//! Views of buffers on the GPU: the two halves of a buffer written by typed `saxpy` launches on
//! two streams (views are tracked at the allocation, so the second half's launch waits for the
//! first's; both results checked), a checked launch (`kernel_args!`) on a view, host copies of
//! views, a fill of a `u8` view at an odd address, device copies between the halves of one
//! buffer, page-locked copies of views, and a view in a graph capture (replayed, checked).

use cuda_stream::{CaptureMode, DeviceBuffer, LaunchConfig, PinnedHostBuffer, kernel_args};
use cuda_stream_tests::{alongside_others, error_chain, gpu, ramp, saxpy_module};

#[test]
fn halves_written_on_two_streams_by_typed_and_checked_launches() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let module = saxpy_module(&ctx);
    let saxpy = module
        .function("saxpy")
        .unwrap()
        .typed::<(u32, f32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let n = 1 << 20;
    let half = n / 2;
    let host = ramp(n);
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let x = DeviceBuffer::from_host(&ctx, &a, &host).unwrap();
    let mut y = DeviceBuffer::from_host(&ctx, &a, &vec![1.0f32; n]).unwrap();
    let config = LaunchConfig::for_elements(half as u32, 256);
    {
        let (x_lo, x_hi) = x.split_at(half).unwrap();
        let (mut y_lo, y_hi) = y.split_at_mut(half).unwrap();
        // y_lo = 2 x_lo + 1 on a; y_hi = 3 x_hi + 1 on b (after the uploads on a, and after the
        // launch on a: one allocation).
        // SAFETY: saxpy reads x[..half] and writes y[..half] of the views it is given.
        unsafe { saxpy.launch(&a, config, (half as u32, 2.0, x_lo, &mut y_lo)) }.unwrap();
        // SAFETY: as above.
        unsafe { saxpy.launch(&b, config, (half as u32, 3.0, x_hi, y_hi)) }.unwrap();
        // A checked launch of the raw function on a view: y_lo += 0.5 x_lo, on b.
        let f = module.function("saxpy").unwrap();
        let (nn, one) = (half as u32, 0.5f32);
        // SAFETY: as above.
        unsafe {
            f.launch(
                &b,
                config,
                &kernel_args![nn, one, x_lo.read(), y_lo.write()],
            )
        }
        .unwrap();
    }
    let got = y.to_vec(&a).unwrap();
    for (i, (&g, &v)) in got.iter().zip(&host).enumerate() {
        let want = if i < half {
            2.5 * v + 1.0
        } else {
            3.0 * v + 1.0
        };
        assert_eq!(g, want, "value {i}");
    }
    // Host copies of views.
    assert_eq!(
        y.slice(half - 2..half + 2).unwrap().to_vec(&b).unwrap(),
        got[half - 2..half + 2]
    );
    y.slice_mut(..4)
        .unwrap()
        .copy_from_host(&b, &[7.0; 4])
        .unwrap();
    let mut first = [0f32; 6];
    y.slice(..6).unwrap().copy_to_host(&a, &mut first).unwrap();
    assert_eq!(first[..4], [7.0; 4]);
    assert_eq!(first[4..], got[4..6]);
    println!("views: two halves of {n} floats written on two streams, checked");
}

#[test]
fn fills_copies_and_captures_of_views() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    // A u8 view at an odd address: a byte-wide memset (a 4-byte one would fail there).
    let mut z = DeviceBuffer::<u8>::zeroed(&ctx, &a, 4099).unwrap();
    z.slice_mut(1..4097).unwrap().fill(&b, 7).unwrap();
    let v = z.to_vec(&a).unwrap();
    assert_eq!((v[0], v[1], v[4096], v[4097], v[4098]), (0, 7, 7, 0, 0));
    assert_eq!(v.iter().filter(|&&b| b == 7).count(), 4096);
    // Device copies between the halves of one buffer, on two streams.
    let mut w = DeviceBuffer::from_host(&ctx, &a, &ramp(1024)).unwrap();
    {
        let (mut lo, hi) = w.split_at_mut(512).unwrap();
        lo.copy_from(&b, &hi).unwrap();
    }
    let got = w.to_vec(&a).unwrap();
    assert_eq!(got[..512], got[512..]);
    assert_eq!(got[..512], ramp(1024)[512..]);
    // Page-locked copies of views, up and down.
    let up = PinnedHostBuffer::from_slice(&ctx, &[5.0f32; 16]).unwrap();
    w.slice_mut(300..316)
        .unwrap()
        .copy_from_pinned(&b, &up)
        .unwrap();
    let mut down = PinnedHostBuffer::<f32>::zeroed(&ctx, 18).unwrap();
    w.slice(299..317)
        .unwrap()
        .copy_to_pinned(&a, &mut down)
        .unwrap();
    let d = down.as_slice().unwrap();
    assert_eq!(d[1..17], [5.0; 16]);
    assert_eq!(
        (d[0], d[17]),
        (ramp(1024)[512 + 299], ramp(1024)[512 + 316])
    );
    // A fill of a view captured into a graph and replayed.
    let mut s = ctx.new_stream().unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            w.slice_mut(100..200).unwrap().fill(&cap, 2.5)
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&s).unwrap();
    let got = w.to_vec(&b).unwrap();
    assert!(got[100..200].iter().all(|&v| v == 2.5));
    assert_eq!(got[99], ramp(1024)[512 + 99]);
    assert_eq!(got[200], ramp(1024)[512 + 200]);
    println!("views: an odd-address u8 fill, copies between halves, a captured fill, checked");
}

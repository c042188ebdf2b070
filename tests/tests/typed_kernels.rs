//! Checked launches, typed kernels, launch attributes and occupancy on the GPU: typed `saxpy`
//! launches on streams and in captures (results checked on the host), arguments that do not
//! match the kernel's parameters refused with the real driver's `cuFuncGetParamInfo` (or the
//! PTX before CUDA 12.4), a thread-block cluster launch that reads `%cluster_ctarank`, a
//! cooperative launch and one too large for the device, priority and programmatic-serialisation
//! launches, and a block size picked by the occupancy calculator.

use cuda_stream::ffi::CUresult;
use cuda_stream::{
    ArgKind, ArgMismatch, CaptureMode, Context, DeviceBuffer, Error, LaunchConfig, Module,
    ParamKind, kernel_args,
};
use cuda_stream_tests::{SAXPY_PTX, alongside_others, error_chain, gpu, ramp};

/// `cluster_ranks(u32 *out)`: thread 0 of each block writes its `%cluster_ctarank` and
/// `%cluster_nctarank` to `out[2 * ctaid.x ..]` (sm_90: PTX 7.8).
const CLUSTER_PTX: &str = r#"
.version 7.8
.target sm_90
.address_size 64

.visible .entry cluster_ranks(.param .u64 cluster_ranks_out)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<5>;
    .reg .b64   %rd<5>;

    ld.param.u64        %rd1, [cluster_ranks_out];
    cvta.to.global.u64  %rd2, %rd1;
    mov.u32             %r4, %tid.x;
    setp.ne.u32         %p1, %r4, 0;
    @%p1 bra            $L_done;
    mov.u32             %r1, %ctaid.x;
    mov.u32             %r2, %cluster_ctarank;
    mov.u32             %r3, %cluster_nctarank;
    mul.wide.u32        %rd3, %r1, 8;
    add.s64             %rd4, %rd2, %rd3;
    st.global.v2.u32    [%rd4], {%r2, %r3};
$L_done:
    ret;
}
"#;

fn load(ctx: &Context, ptx: &str) -> Module {
    Module::from_ptx(ctx, ptx).unwrap_or_else(|e| panic!("{}", error_chain(&e)))
}

fn saxpy_expected(x: &[f32], y0: f32, a: f32, times: usize) -> Vec<f32> {
    x.iter()
        .map(|&v| {
            let mut y = y0;
            for _ in 0..times {
                y += a * v;
            }
            y
        })
        .collect()
}

#[test]
fn typed_launches_on_streams_and_in_captures() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let module = load(&ctx, SAXPY_PTX);
    let saxpy = module
        .function("saxpy")
        .unwrap()
        .typed::<(u32, f32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let n = 1 << 20;
    let host = ramp(n);
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let x = DeviceBuffer::from_host(&ctx, &a, &host).unwrap();
    let mut y = DeviceBuffer::from_host(&ctx, &a, &vec![1.0f32; n]).unwrap();
    let config = LaunchConfig::for_elements(n as u32, 256);
    // On b, after the uploads on a (ordered by the buffers' use tracking).
    // SAFETY: saxpy reads x[..n] and writes y[..n].
    unsafe { saxpy.launch(&b, config, (n as u32, 2.0, &x, &mut y)) }.unwrap();
    assert_eq!(y.to_vec(&a).unwrap(), saxpy_expected(&host, 1.0, 2.0, 1));

    let mut s = ctx.new_stream().unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            // SAFETY: as above.
            unsafe { saxpy.launch(&cap, config, (n as u32, 0.5, &x, &mut y)) }
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    for _ in 0..4 {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    let mut want = saxpy_expected(&host, 1.0, 2.0, 1);
    for (w, v) in want.iter_mut().zip(&host) {
        for _ in 0..4 {
            *w += 0.5 * v;
        }
    }
    assert_eq!(y.to_vec(&s).unwrap(), want);
    println!("typed saxpy: 1 launch and 4 replays of a captured one over {n} floats, checked");
}

#[test]
fn mismatched_arguments_are_refused_with_the_real_driver() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let module = load(&ctx, SAXPY_PTX);
    let f = module.function("saxpy").unwrap();
    let params = f
        .params()
        .expect("PTX or cuFuncGetParamInfo knows saxpy's parameters");
    let sizes: Vec<u32> = params.iter().map(|p| p.size).collect();
    assert_eq!(sizes, [4, 4, 8, 8]);
    assert_eq!(params[1].kind, ParamKind::Float);
    let stream = ctx.new_stream().unwrap();
    let x = DeviceBuffer::from_host(&ctx, &stream, &[1.0f32; 256]).unwrap();
    let mut y = DeviceBuffer::from_host(&ctx, &stream, &[0.0f32; 256]).unwrap();
    let c = LaunchConfig::for_elements(256, 256);
    let mismatch = |r: cuda_stream::Result<()>| match r {
        Err(Error::ArgumentMismatch { kernel, mismatch }) => {
            assert_eq!(kernel, "saxpy");
            mismatch
        }
        other => panic!("not a mismatch: {other:?}"),
    };
    let (n, a) = (256u32, 3.0f32);
    // SAFETY: refused before the driver (so for each launch below).
    let e = mismatch(unsafe { f.launch(&stream, c, &kernel_args![n, a, x.read()]) });
    assert_eq!(e, ArgMismatch::Count { params: 4, args: 3 });
    // SAFETY: refused before the driver is called: the arguments do not match.
    let r = unsafe { f.launch(&stream, c, &kernel_args![256u64, a, x.read(), y.write()]) };
    println!("a u64 for saxpy's n: {}", r.as_ref().unwrap_err());
    assert_eq!(
        mismatch(r),
        ArgMismatch::Size {
            index: 0,
            param: 4,
            arg: 8
        }
    );
    // SAFETY: refused before the driver is called: the arguments do not match.
    let e = mismatch(unsafe { f.launch(&stream, c, &kernel_args![a, n, x.read(), y.write()]) });
    assert_eq!(
        e,
        ArgMismatch::Kind {
            index: 0,
            param: ParamKind::Integer,
            arg: ArgKind::Float
        }
    );
    let e = f
        .typed::<(u32, f32, &DeviceBuffer<f32>, u32)>()
        .unwrap_err();
    assert!(matches!(
        e,
        Error::ArgumentMismatch {
            mismatch: ArgMismatch::Size {
                index: 3,
                param: 8,
                arg: 4
            },
            ..
        }
    ));
    // Nothing was launched: y is still zero; a matching launch works.
    assert_eq!(y.to_vec(&stream).unwrap(), vec![0.0; 256]);
    // SAFETY: saxpy reads x[..256] and writes y[..256].
    unsafe { f.launch(&stream, c, &kernel_args![n, a, x.read(), y.write()]) }.unwrap();
    assert_eq!(y.to_vec(&stream).unwrap(), vec![3.0; 256]);
}

#[test]
fn a_cluster_launch_runs_blocks_in_clusters() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let major = ctx
        .device()
        .attribute(
            cuda_stream::ffi::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        )
        .unwrap();
    let module = match Module::from_ptx(&ctx, CLUSTER_PTX) {
        Ok(m) => m,
        Err(e) if major < 9 => {
            println!("skipped: compute capability {major} has no clusters ({e})");
            return;
        }
        Err(e) => panic!("{}", error_chain(&e)),
    };
    let k = module
        .function("cluster_ranks")
        .unwrap()
        .typed::<(&mut DeviceBuffer<u32>,)>()
        .unwrap();
    let stream = ctx.new_stream().unwrap();
    let blocks = 16u32;
    let mut out = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 2 * blocks as usize).unwrap();
    let config = LaunchConfig::new(blocks, 32).cluster(4);
    // SAFETY: cluster_ranks writes out[..2 * blocks] only.
    match unsafe { k.launch(&stream, config, (&mut out,)) } {
        Err(e @ Error::UnsupportedAttribute { .. }) if major < 9 => {
            println!("skipped: {e}");
            return;
        }
        r => r.unwrap_or_else(|e| panic!("{}", error_chain(&e))),
    }
    let got = out.to_vec(&stream).unwrap();
    for b in 0..blocks as usize {
        assert_eq!((got[2 * b], got[2 * b + 1]), (b as u32 % 4, 4), "block {b}");
    }
    // Without the attribute every block is a cluster of its own.
    // SAFETY: as above.
    unsafe { k.launch(&stream, LaunchConfig::new(blocks, 32), (&mut out,)) }.unwrap();
    let got = out.to_vec(&stream).unwrap();
    assert!(got.chunks(2).all(|c| c == [0, 1]), "{got:?}");
    // A grid that is no multiple of the cluster is refused before the driver.
    // SAFETY: refused before the driver: the grid is no multiple of the cluster.
    let e = unsafe { k.launch(&stream, LaunchConfig::new(6, 32).cluster(4), (&mut out,)) };
    assert!(matches!(e, Err(Error::InvalidLaunch { .. })), "{e:?}");
    println!("cluster launch: {blocks} blocks in clusters of 4, ranks checked");
}

#[test]
fn cooperative_priority_and_programmatic_launches() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let module = load(&ctx, SAXPY_PTX);
    let f = module.function("saxpy").unwrap();
    let saxpy = f
        .typed::<(u32, f32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()
        .unwrap();
    let stream = ctx.new_stream().unwrap();
    let n = 4096u32;
    let x = DeviceBuffer::from_host(&ctx, &stream, &vec![1.0f32; n as usize]).unwrap();
    let mut y = DeviceBuffer::from_host(&ctx, &stream, &vec![0.0f32; n as usize]).unwrap();
    let base = LaunchConfig::for_elements(n, 256);
    let (lowest, highest) = {
        let r = ctx.priority_range().unwrap();
        (r.least(), r.greatest())
    };
    let configs = [
        ("cooperative", base.cooperative(true)),
        ("priority (greatest)", base.priority(highest)),
        ("priority (least)", base.priority(lowest)),
        (
            "programmatic serialization",
            base.programmatic_serialization(true),
        ),
    ];
    let mut ran = 0.0;
    for (what, config) in configs {
        // SAFETY: saxpy reads x[..n] and writes y[..n].
        match unsafe { saxpy.launch(&stream, config, (n, 1.0, &x, &mut y)) } {
            Ok(()) => ran += 1.0,
            Err(e) if e.is_unsupported() => println!("{what}: {e}"),
            Err(e) => panic!("{what}: {}", error_chain(&e)),
        }
    }
    assert_eq!(y.to_vec(&stream).unwrap(), vec![ran; n as usize]);
    assert!(
        ran >= 3.0,
        "an H100 with a current driver supports these ({ran} ran)"
    );

    // A cooperative grid larger than the device can hold at once.
    let sms = ctx
        .device()
        .attribute(cuda_stream::ffi::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .unwrap() as u32;
    let per_sm = f.max_active_blocks_per_multiprocessor(1024, 0).unwrap();
    let too_many = LaunchConfig::new(sms * per_sm.max(1) * 4, 1024).cooperative(true);
    let m = too_many.grid.x * 1024;
    let xb = DeviceBuffer::<f32>::zeroed(&ctx, &stream, m as usize).unwrap();
    let mut yb = DeviceBuffer::<f32>::zeroed(&ctx, &stream, m as usize).unwrap();
    // SAFETY: saxpy reads xb[..m] and writes yb[..m].
    let e = unsafe { saxpy.launch(&stream, too_many, (m, 1.0, &xb, &mut yb)) }.unwrap_err();
    println!("a cooperative grid of {} blocks: {e}", too_many.grid.x);
    assert_eq!(
        e.driver_code(),
        Some(CUresult::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE),
        "{e:?}"
    );
    stream.synchronize().unwrap();
}

#[test]
fn occupancy_picks_a_block_size_that_runs() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let module = load(&ctx, SAXPY_PTX);
    let f = module.function("saxpy").unwrap();
    let size = f.max_potential_block_size(0).unwrap();
    println!(
        "saxpy: blocks of {} threads, at least {} blocks to fill the device",
        size.block, size.min_grid
    );
    assert!(size.block % 32 == 0 && size.block <= f.max_threads_per_block());
    assert!(size.min_grid > 0);
    assert!(
        f.max_active_blocks_per_multiprocessor(size.block, 0)
            .unwrap()
            >= 1
    );
    let n = 100_000u32;
    let config = LaunchConfig::for_elements_auto(f, n).unwrap();
    assert_eq!(config.block.x, size.block);
    let saxpy = f
        .typed::<(u32, f32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()
        .unwrap();
    let stream = ctx.new_stream().unwrap();
    let x = DeviceBuffer::from_host(&ctx, &stream, &vec![2.0f32; n as usize]).unwrap();
    let mut y = DeviceBuffer::from_host(&ctx, &stream, &vec![1.0f32; n as usize]).unwrap();
    // SAFETY: saxpy reads x[..n] and writes y[..n].
    unsafe { saxpy.launch(&stream, config, (n, 3.0, &x, &mut y)) }.unwrap();
    assert_eq!(y.to_vec(&stream).unwrap(), vec![7.0; n as usize]);
}

// Launches, memsets and copies take any `Enqueue`: the capture view and its forks too.
use cuda_stream::{
    CaptureMode, Context, DeviceBuffer, Error, LaunchConfig, Module, Result, kernel_args,
    memcpy_dtod_async, memset_d32_async,
};

const PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
    .visible .entry k(.param .u64 k_p, .param .u32 k_n)\n{\n\tret;\n}\n";

fn run(ctx: Context) -> Result<()> {
    let mut stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, PTX)?;
    let k = module.function("k")?;
    let a = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 16)?;
    let b = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 16)?;
    let (pa, pb) = (a.device_ptr(), b.device_ptr());
    let graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        // SAFETY: `a` holds 16 words and outlives the graph's launches.
        unsafe { memset_d32_async(&cap, pa, 7, 16) }?;
        cap.scope(|s| {
            let fork = s.fork()?;
            // SAFETY: `k` takes (pointer, u32) and does nothing.
            unsafe { k.launch(&fork, LaunchConfig::new(1, 16), &kernel_args![pa, 16u32]) }
        })?;
        // SAFETY: `a` and `b` hold 64 bytes each and outlive the graph's launches.
        unsafe { memcpy_dtod_async(&cap, pb, pa, 64) }
    })?;
    graph.instantiate()?.launch(&stream)?;
    assert_eq!(b.to_vec(&stream)?, [7; 16]);
    Ok(())
}

fn main() {
    match Context::primary(0) {
        Ok(ctx) => run(ctx).expect("kernels in a capture failed"),
        Err(
            e
            @ (Error::Load(_) | Error::NoSuchDevice { .. } | Error::Driver { call: "cuInit", .. }),
        ) => {
            eprintln!("skipped: no CUDA device: {e}")
        }
        Err(e) => panic!("Context::primary(0) failed: {e}"),
    }
}

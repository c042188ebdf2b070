// A typed kernel is declared once and launched with fresh buffers in a loop (its signature's
// buffer lifetimes bind nothing), stored in a struct, and used on a capture view.
use cuda_stream::{
    CaptureMode, Context, DeviceBuffer, Error, LaunchConfig, Module, Result, TypedKernel,
};

const PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
    .visible .entry k(.param .u64 k_p, .param .u32 k_n)\n{\n\tret;\n}\n";

struct Kernels<'m> {
    k: TypedKernel<'m, (&'static mut DeviceBuffer<u32>, u32)>,
}

fn run(ctx: Context) -> Result<()> {
    let mut stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, PTX)?;
    let k = module.function("k")?.typed::<(&mut DeviceBuffer<u32>, u32)>()?;
    for n in 1..4 {
        let mut a = DeviceBuffer::<u32>::zeroed(&ctx, &stream, n)?;
        // SAFETY: `k` does nothing.
        unsafe { k.launch(&stream, LaunchConfig::new(1, 16), (&mut a, n as u32)) }?;
    }
    let kernels = Kernels { k: module.function("k")?.typed()? };
    let mut b = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 16)?;
    let graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        cap.scope(|s| {
            let fork = s.fork()?;
            // SAFETY: `k` does nothing.
            unsafe { kernels.k.launch(&fork, LaunchConfig::new(1, 16), (&mut b, 16)) }
        })
    })?;
    graph.instantiate()?.launch(&stream)?;
    stream.synchronize()
}

fn main() {
    match Context::primary(0) {
        Ok(ctx) => run(ctx).expect("typed kernels failed"),
        Err(
            e
            @ (Error::Load(_) | Error::NoSuchDevice { .. } | Error::Driver { call: "cuInit", .. }),
        ) => {
            eprintln!("skipped: no CUDA device: {e}")
        }
        Err(e) => panic!("Context::primary(0) failed: {e}"),
    }
}

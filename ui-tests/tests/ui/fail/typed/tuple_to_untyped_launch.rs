// A tuple of values is what a typed kernel takes: the untyped launch says so, pointing at
// `typed()`, instead of only "expected `&[KernelArg<'_>]`".
use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let f = module.function("scale")?;
    let x = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    // SAFETY: never run (does not compile).
    unsafe { f.launch(&stream, LaunchConfig::new(1, 16), &(16u32, 2.0f32, &x)) }?;
    Ok(())
}

// A buffer cannot be dropped (its free enqueued) while a kernel argument still borrows it.
use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module, kernel_args};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let scale = module.function("scale")?;
    let mut y = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    let arg = y.write();
    drop(y);
    // SAFETY: not reached: the drop above does not compile.
    unsafe { scale.launch(&stream, LaunchConfig::new(1, 16), &kernel_args![arg]) }
}

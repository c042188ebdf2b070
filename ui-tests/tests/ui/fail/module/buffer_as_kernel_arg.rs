// A buffer is passed to a kernel as `buf.read()` or `buf.write()`, which the launch orders and
// records; the buffer value itself is no kernel argument, so passing it does not compile.
use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module, kernel_args};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let kernel = module.function("k")?;
    let buf = DeviceBuffer::<f32>::alloc(&ctx, 16)?;
    unsafe { kernel.launch(&stream, LaunchConfig::new(1, 16), &kernel_args![buf]) }
}

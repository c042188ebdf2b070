// Kernel arguments borrow their values: an argument array cannot outlive a temporary it points
// to (here the address returned by `device_ptr()`), so it cannot dangle at the launch.
use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module, kernel_args};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let kernel = module.function("k")?;
    let buf = DeviceBuffer::<f32>::alloc(&ctx, 16)?;
    let args = kernel_args![buf.device_ptr(), 16u32];
    unsafe { kernel.launch(&stream, LaunchConfig::new(1, 16), &args) }
}

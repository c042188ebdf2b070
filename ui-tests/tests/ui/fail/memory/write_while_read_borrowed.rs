// A kernel argument that writes a buffer borrows it mutably: it cannot be made while a read of
// the same buffer is alive (the kernel would read and write it through two parameters).
use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module, kernel_args};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let copy = module.function("copy")?;
    let mut x = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    let src = x.read();
    let dst = x.write();
    // SAFETY: not reached: the borrows above do not compile.
    unsafe { copy.launch(&stream, LaunchConfig::new(1, 16), &kernel_args![dst, src]) }
}

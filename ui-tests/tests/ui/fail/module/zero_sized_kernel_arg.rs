// A zero-sized value is no kernel argument: the driver would read the parameter's bytes from
// behind it. `kernel_args!` (and `KernelArg::new`) refuse it at compile time.
use cuda_stream::{Context, LaunchConfig, Module, kernel_args};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let read = module.function("read")?;
    let (nothing, n) = ([0u64; 0], 16u32);
    unsafe { read.launch(&stream, LaunchConfig::new(1, 1), &kernel_args![nothing, n]) }
}

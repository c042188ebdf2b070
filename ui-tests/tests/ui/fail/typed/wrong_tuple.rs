// A typed kernel takes exactly the tuple it was declared with: a missing argument, or one of
// another type, does not compile.
use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let saxpy = module
        .function("saxpy")?
        .typed::<(u32, f32, &DeviceBuffer<f32>, &mut DeviceBuffer<f32>)>()?;
    let x = DeviceBuffer::<f32>::alloc(&ctx, 16)?;
    let mut y = DeviceBuffer::<f32>::alloc(&ctx, 16)?;
    unsafe { saxpy.launch(&stream, LaunchConfig::new(1, 16), (16u32, &x, &mut y)) }?;
    unsafe { saxpy.launch(&stream, LaunchConfig::new(1, 16), (16u64, 2.0f32, &x, &mut y)) }
}

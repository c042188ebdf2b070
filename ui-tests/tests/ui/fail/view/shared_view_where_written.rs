// A typed kernel's written parameter (`&mut DeviceBuffer<T>`) takes an exclusive view, never a
// shared one: the launch would record a read where the kernel writes.
use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let scale = module
        .function("scale")?
        .typed::<(&mut DeviceBuffer<f32>, u32)>()?;
    let x = DeviceBuffer::<f32>::alloc(&ctx, 16)?;
    unsafe { scale.launch(&stream, LaunchConfig::new(1, 8), (x.slice(..8)?, 8)) }
}

// A typed kernel that writes a buffer takes it as `&mut DeviceBuffer`: a shared borrow, which
// another reader may hold at the same time, does not compile.
use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let scale = module
        .function("scale")?
        .typed::<(&mut DeviceBuffer<f32>, u32)>()?;
    let x = DeviceBuffer::<f32>::alloc(&ctx, 16)?;
    unsafe { scale.launch(&stream, LaunchConfig::new(1, 16), (&x, 16)) }
}

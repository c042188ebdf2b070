// A typed launch's arguments borrow their buffers: a buffer cannot be dropped (freed) while
// arguments that name it are held for a launch.
use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let scale = module
        .function("scale")?
        .typed::<(&mut DeviceBuffer<f32>, u32)>()?;
    let mut x = DeviceBuffer::<f32>::alloc(&ctx, 16)?;
    let args = (&mut x, 16);
    drop(x);
    unsafe { scale.launch(&stream, LaunchConfig::new(1, 16), args) }
}

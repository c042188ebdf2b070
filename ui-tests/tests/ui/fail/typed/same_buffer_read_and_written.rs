// A buffer a typed kernel writes cannot also be passed as one it reads in the same launch:
// `&mut` and `&` of one buffer cannot coexist.
use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let module = Module::from_ptx(&ctx, "")?;
    let copy = module
        .function("copy")?
        .typed::<(&DeviceBuffer<f32>, &mut DeviceBuffer<f32>, u32)>()?;
    let mut x = DeviceBuffer::<f32>::alloc(&ctx, 16)?;
    unsafe { copy.launch(&stream, LaunchConfig::new(1, 16), (&x, &mut x, 16)) }
}

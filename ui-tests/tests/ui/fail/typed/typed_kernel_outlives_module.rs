// A typed kernel is borrowed from its module, as its function is: it cannot be used once the
// module is dropped (unloaded).
use cuda_stream::{Context, DeviceBuffer, Module};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let kernel = {
        let module = Module::from_ptx(&ctx, "")?;
        module.function("scale")?.typed::<(&mut DeviceBuffer<f32>, u32)>()?
    };
    println!("{:?}", kernel);
    Ok(())
}

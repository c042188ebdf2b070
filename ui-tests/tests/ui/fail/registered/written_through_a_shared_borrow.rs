// A copy that writes the host memory takes it by `&mut`: not while a slice of it is held.
use cuda_stream::{Context, DeviceBuffer, RegisteredHost};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let dev = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    let mut data = vec![0.0f32; 16];
    RegisteredHost::scope(&ctx, &mut data, |host| {
        let values = host.as_slice()?;
        dev.copy_to_pinned(&stream, host)?;
        println!("{}", values[0]);
        Ok::<(), cuda_stream::Error>(())
    })??;
    Ok(())
}

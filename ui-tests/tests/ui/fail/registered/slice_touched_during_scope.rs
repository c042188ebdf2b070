// The slice is borrowed by the scope: it cannot be read or written while a copy may be in flight
// on it, only through the registered memory's `as_slice` / `as_mut_slice`, which wait.
use cuda_stream::{Context, DeviceBuffer, RegisteredHost};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let dev = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    let mut data = vec![0.0f32; 16];
    RegisteredHost::scope(&ctx, &mut data, |host| {
        dev.copy_to_pinned(&stream, host)?;
        data[0] = 1.0;
        Ok::<(), cuda_stream::Error>(())
    })??;
    Ok(())
}

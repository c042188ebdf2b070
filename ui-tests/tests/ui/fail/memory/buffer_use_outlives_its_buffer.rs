// A kernel argument made from a buffer borrows it: it cannot outlive the buffer.
use cuda_stream::{BufferUse, Context, DeviceBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let arg: BufferUse<'_>;
    {
        let x = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
        arg = x.read();
    }
    println!("{arg:?}");
    Ok(())
}

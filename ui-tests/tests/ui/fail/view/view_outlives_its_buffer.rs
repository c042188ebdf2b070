// A view borrows its buffer: dropping the buffer (which frees the memory) while a view of it is
// still used does not compile.
use cuda_stream::{Context, DeviceBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let x = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    let half = x.slice(..8)?;
    drop(x);
    let _ = half.to_vec(&stream)?;
    Ok(())
}

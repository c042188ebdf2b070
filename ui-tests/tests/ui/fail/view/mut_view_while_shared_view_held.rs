// An exclusive view is an exclusive borrow: it cannot be taken while a shared view of the same
// buffer is held, as `&mut [T]` cannot while a `&[T]` lives.
use cuda_stream::{Context, DeviceBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let mut x = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    let src = x.slice(8..)?;
    let mut dst = x.slice_mut(..8)?;
    dst.copy_from(&stream, &src)?;
    Ok(())
}

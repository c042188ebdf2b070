// A shared view only reads: it has no `fill` (nor any copy into it); writing takes `slice_mut`.
use cuda_stream::{Context, DeviceBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let x = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    x.slice(..8)?.fill(&stream, 1.0)?;
    Ok(())
}

// Two exclusive views of one buffer cannot be held at once (as two `&mut [T]` of one slice
// cannot), overlapping or not: `split_at_mut` is the way to two disjoint ones.
use cuda_stream::{Context, DeviceBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let mut x = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    let mut a = x.slice_mut(..8)?;
    let mut b = x.slice_mut(4..)?;
    a.fill(&stream, 1.0)?;
    b.fill(&stream, 2.0)?;
    Ok(())
}

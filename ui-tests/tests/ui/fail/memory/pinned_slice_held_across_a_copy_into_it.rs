// A copy into a pinned buffer takes it by `&mut`: a slice of it read on the host cannot be held
// across the copy, which the DMA engine may be writing.
use cuda_stream::{Context, DeviceBuffer, PinnedHostBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let dev = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 16)?;
    let mut host = PinnedHostBuffer::<u32>::zeroed(&ctx, 16)?;
    let view = host.as_slice()?;
    dev.copy_to_pinned(&stream, &mut host)?;
    println!("{}", view[0]);
    Ok(())
}

// An upload reads a pinned buffer while it runs: a `&mut` slice of it cannot be held (and
// written) across the upload.
use cuda_stream::{Context, DeviceBuffer, PinnedHostBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let dev = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 16)?;
    let mut host = PinnedHostBuffer::<u32>::zeroed(&ctx, 16)?;
    let values = host.as_mut_slice()?;
    dev.copy_from_pinned(&stream, &host)?;
    values[0] = 1;
    Ok(())
}

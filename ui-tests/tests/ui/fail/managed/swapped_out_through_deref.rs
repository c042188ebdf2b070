// A managed buffer is a device buffer only through a shared borrow: it cannot be swapped with a
// plain device buffer (whose memory the host cannot touch) through `DerefMut`.
use cuda_stream::{Context, DeviceBuffer, ManagedBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let mut m = ManagedBuffer::<u32>::zeroed(&ctx, 16)?;
    let mut d = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 16)?;
    std::mem::swap(&mut *m, &mut d);
    Ok(())
}

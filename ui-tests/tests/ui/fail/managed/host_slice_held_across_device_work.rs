// Host access to managed memory borrows the buffer exclusively: no device work can be enqueued
// on it while the host's slice lives (it would race with the host's reads).
use cuda_stream::{Context, ManagedBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let mut m = ManagedBuffer::<u32>::zeroed(&ctx, 16)?;
    let host = m.as_slice()?;
    m.fill(&stream, 7)?;
    println!("{}", host[0]);
    Ok(())
}

// A graph buffer's memory exists only while the graph runs: it cannot leave the capture that
// allocated it (its lifetime is the capture's).
use cuda_stream::{CaptureMode, Context, GraphBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let mut kept = None;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        kept = Some(GraphBuffer::<u32>::alloc(&ctx, cap, 16)?);
        Ok(())
    })?;
    drop(kept);
    Ok(())
}

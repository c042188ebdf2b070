// The guard names its stream as the thread's current stream: it must not outlive the stream.
use cuda_stream::Context;

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let guard;
    {
        let stream = ctx.new_stream()?;
        guard = stream.make_current();
    }
    drop(guard);
    Ok(())
}

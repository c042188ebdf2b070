// A fork in a capture is joined back when its scope ends: it cannot be returned out of it.
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        let fork = cap.scope(|s| s.fork())?;
        drop(fork);
        Ok(())
    })?;
    Ok(())
}

// The stream being captured is borrowed exclusively: the owner cannot be used (here, to
// synchronise) inside its own capture.
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |_cap| stream.synchronize())?;
    Ok(())
}

// The capture view has no `query`: polling a capturing stream invalidates the capture.
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| cap.query().map(drop))?;
    Ok(())
}

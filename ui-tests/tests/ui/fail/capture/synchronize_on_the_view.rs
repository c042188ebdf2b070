// The capture view has no `synchronize`: waiting for work that is being recorded, not run,
// would invalidate the capture.
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| cap.synchronize())?;
    Ok(())
}

// An event recorded in a capture stands for work that is recorded, not run: it has no
// `synchronize` (nor `query`), which would invalidate the capture.
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        let marker = cap.record_event()?;
        marker.synchronize()
    })?;
    Ok(())
}

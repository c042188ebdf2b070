// An event recorded in a capture is the capture's: it cannot leave the closure.
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let mut marker = None;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        marker = Some(cap.record_event()?);
        Ok(())
    })?;
    drop(marker);
    Ok(())
}

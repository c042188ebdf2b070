// The capture view has no `completed`: its run-once host function would run on every replay.
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        let _done = cap.completed();
        Ok(())
    })?;
    Ok(())
}

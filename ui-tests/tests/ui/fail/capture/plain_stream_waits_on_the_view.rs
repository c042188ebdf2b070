// The capture view is not a plain stream: another stream cannot wait on it (it would be pulled
// into the capture); forks come from the view's scope.
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let other = ctx.new_stream()?;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| other.wait_stream(&cap))?;
    Ok(())
}

// The capture view cannot leave the closure: the capture ends when it returns.
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let mut escaped = None;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        escaped = Some(cap);
        Ok(())
    })?;
    drop(escaped);
    Ok(())
}

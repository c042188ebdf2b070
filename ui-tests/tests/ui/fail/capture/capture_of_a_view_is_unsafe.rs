// Capturing through a `Stream` view is `unsafe`: other copies of the view could be used during
// the capture. Owners capture safely through `&mut`.
use cuda_stream::{AsStream, CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let _graph = stream
        .as_stream()
        .capture(CaptureMode::ThreadLocal, |_cap| Ok(()))?;
    Ok(())
}

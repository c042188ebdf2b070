// Reading a buffer back to the host waits for the stream: on the capture view that would wait
// for work that is being recorded, not run. The view is no `AsStream`, so `to_vec` (and
// `copy_to_host`, `copy_from_host`, `from_host`) cannot be given it.
use cuda_stream::{CaptureMode, Context, DeviceBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let buf = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| buf.to_vec(&cap).map(drop))?;
    Ok(())
}

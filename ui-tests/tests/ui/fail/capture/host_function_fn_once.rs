// A host function in a graph runs on every replay: a closure that can run only once (it moves
// out of its capture) is refused.
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let message = String::from("replayed");
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        cap.launch_host_func(move || drop(message))
    })?;
    Ok(())
}

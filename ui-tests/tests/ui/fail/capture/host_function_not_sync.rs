// Replays of a graph may run its host function from several driver threads at once: the
// closure must be `Sync`, which a `Cell` is not.
use std::cell::Cell;

use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let replays = Cell::new(0u32);
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        cap.launch_host_func(move || replays.set(replays.get() + 1))
    })?;
    Ok(())
}

// A host function in a graph runs whenever the graph is replayed, long after this frame: it
// must own what it uses ('static).
use std::sync::atomic::{AtomicUsize, Ordering};

use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let replays = AtomicUsize::new(0);
    let _graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
        cap.launch_host_func(|| {
            replays.fetch_add(1, Ordering::Relaxed);
        })
    })?;
    Ok(())
}

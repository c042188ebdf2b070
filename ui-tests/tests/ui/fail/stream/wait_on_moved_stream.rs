// Enqueueing a wait on a stream that was moved to another binding.
use cuda_stream::{Context, EventOptions};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let event = ctx.new_event(EventOptions::new())?;
    let s = ctx.new_stream()?;
    let t = s;
    s.wait_event(&event)?;
    t.synchronize()
}

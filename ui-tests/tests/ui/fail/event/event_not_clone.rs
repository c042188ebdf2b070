// An `Event` destroys its handle on drop; a clone would destroy it twice.
use cuda_stream::{Context, EventOptions};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let event = ctx.new_event(EventOptions::new())?;
    let copy = event.clone();
    copy.synchronize()
}

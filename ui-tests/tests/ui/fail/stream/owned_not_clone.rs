// An `OwnedStream` destroys its handle on drop; a clone would destroy it twice.
use cuda_stream::Context;

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let copy = stream.clone();
    copy.synchronize()
}

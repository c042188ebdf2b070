// Moving the `OwnedStream` away (here into `drop`) while a view of it is alive.
use cuda_stream::{AsStream, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let owned = ctx.new_stream()?;
    let view = owned.as_stream();
    drop(owned);
    view.synchronize()
}

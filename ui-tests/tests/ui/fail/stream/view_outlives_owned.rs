// A `Stream<'_>` view lent by `as_stream` must not outlive the `OwnedStream` it borrows:
// the stream is destroyed when the owner drops, so the view would name a dead handle.
use cuda_stream::{AsStream, Context, Stream};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let view: Stream<'_>;
    {
        let owned = ctx.new_stream()?;
        view = owned.as_stream();
    }
    view.synchronize()
}

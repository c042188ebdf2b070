// The legacy default stream is resolved through its context: the view must not outlive it.
use cuda_stream::{Context, Stream};

fn main() -> cuda_stream::Result<()> {
    let legacy: Stream<'_>;
    {
        let ctx = Context::primary(0)?;
        legacy = ctx.legacy_stream();
    }
    legacy.synchronize()
}

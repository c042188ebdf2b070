// Current-stream guards nest within the lifetimes of their streams; `current_stream` lends the
// innermost one, or the legacy default stream when none is installed.
use cuda_stream::{AsStream, Context, Error, Result, current_stream, current_stream_raw};

fn run(ctx: Context) -> Result<()> {
    let outer = ctx.new_stream()?;
    let inner = ctx.new_stream()?;
    {
        let _outer_guard = outer.make_current();
        current_stream(&ctx, |cur| assert_eq!(cur, outer.as_stream()));
        {
            let _inner_guard = inner.as_stream().make_current();
            current_stream(&ctx, |cur| assert_eq!(cur, inner.as_stream()));
            assert_eq!(current_stream_raw(&ctx), inner.raw());
        }
        current_stream(&ctx, |cur| assert_eq!(cur, outer.as_stream()));
        current_stream(&ctx, |cur| cur.synchronize())?;
    }
    current_stream(&ctx, |cur| assert_eq!(cur, ctx.legacy_stream()));
    Ok(())
}

fn main() {
    match Context::primary(0) {
        Ok(ctx) => run(ctx).expect("stream operations failed"),
        Err(
            e
            @ (Error::Load(_) | Error::NoSuchDevice { .. } | Error::Driver { call: "cuInit", .. }),
        ) => {
            eprintln!("skipped: no CUDA device: {e}")
        }
        Err(e) => panic!("Context::primary(0) failed: {e}"),
    }
}

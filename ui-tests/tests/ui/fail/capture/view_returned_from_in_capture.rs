// A view of a capture begun elsewhere cannot be returned out of `in_capture` either.
use cuda_stream::Context;

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let escaped = stream.in_capture(|cap| Ok(cap))?;
    drop(escaped);
    Ok(())
}

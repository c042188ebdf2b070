// A fork goes back to the pool when the scope ends: it cannot be returned out of the closure.
use cuda_stream::Context;

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let main = ctx.new_stream()?;
    let escaped = main.scope(|s| s.fork())?;
    escaped.synchronize()
}

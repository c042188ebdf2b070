// A `ContextBinding` pushed a context on this thread and must pop it here: it is not `Send`.
use cuda_stream::Context;

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let binding = ctx.bind()?;
    std::thread::scope(|scope| {
        scope.spawn(move || drop(binding));
    });
    Ok(())
}

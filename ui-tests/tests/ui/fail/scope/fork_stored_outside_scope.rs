// A fork goes back to the pool when the scope ends: it cannot be stored in a collection that
// outlives the scope.
use cuda_stream::{Context, Stream};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let main = ctx.new_stream()?;
    let mut forks: Vec<Stream<'_>> = Vec::new();
    main.scope(|s| {
        forks.push(s.fork()?);
        Ok(())
    })?;
    forks[0].synchronize()
}

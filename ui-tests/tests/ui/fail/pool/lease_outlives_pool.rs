// The pool destroys its streams when it drops: a lease must not outlive it.
use cuda_stream::{Context, StreamOptions, StreamPool};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let lease;
    {
        let pool = StreamPool::new(&ctx, StreamOptions::new());
        lease = pool.acquire()?;
    }
    lease.synchronize()
}

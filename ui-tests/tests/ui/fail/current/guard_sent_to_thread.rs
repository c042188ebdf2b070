// The current-stream setting belongs to the thread that made it: the guard is not `Send`.
use cuda_stream::{Context, OwnedStream};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream: &'static OwnedStream = Box::leak(Box::new(ctx.new_stream()?));
    let guard = stream.make_current();
    let handle = std::thread::spawn(move || drop(guard));
    handle.join().unwrap();
    Ok(())
}

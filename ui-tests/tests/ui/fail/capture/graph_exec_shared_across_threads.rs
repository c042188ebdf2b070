// The driver does not synchronise graph objects: an executable graph may move to another
// thread, but not be shared by two (`GraphExec` is not `Sync`).
use cuda_stream::{CaptureMode, Context};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let mut stream = ctx.new_stream()?;
    let exec = stream
        .capture(CaptureMode::ThreadLocal, |_cap| Ok(()))?
        .instantiate()?;
    std::thread::scope(|s| {
        s.spawn(|| exec.launch(&stream));
        s.spawn(|| exec.launch(&stream));
    });
    Ok(())
}

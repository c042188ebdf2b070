// `close` consumes the stream: it cannot be used afterwards.
use cuda_stream::Context;

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    stream.close()?;
    stream.synchronize()
}

// Host functions run later, after this function may have returned: a closure borrowing a local
// is not `'static`.
use cuda_stream::Context;

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let buffer = vec![0u8; 16];
    let view = &buffer[..];
    stream.launch_host_func(move || println!("{}", view.len()))?;
    stream.synchronize()
}

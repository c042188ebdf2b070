// Host functions run on a driver thread: a closure holding an `Rc` is not `Send`.
use std::rc::Rc;

use cuda_stream::Context;

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let shared = Rc::new(5);
    stream.launch_host_func(move || println!("{shared}"))?;
    stream.synchronize()
}

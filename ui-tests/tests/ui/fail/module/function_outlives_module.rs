// A kernel is borrowed from its module: it cannot be used once the module is dropped (unloaded).
use cuda_stream::{Context, Module};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let kernel = {
        let module = Module::from_ptx(&ctx, "")?;
        module.function("k")?
    };
    println!("{}", kernel.max_threads_per_block());
    Ok(())
}

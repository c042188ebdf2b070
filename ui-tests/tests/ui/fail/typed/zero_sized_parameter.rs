// A zero-sized type has no bytes for the kernel to read: declared as a typed kernel's parameter
// (here `[u64; 0]` where the kernel takes a pointer), it does not compile.
use cuda_stream::{Context, Module};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let module = Module::from_ptx(&ctx, "")?;
    let kernel = module.function("read")?.typed::<([u64; 0], u32)>()?;
    println!("{kernel:?}");
    Ok(())
}

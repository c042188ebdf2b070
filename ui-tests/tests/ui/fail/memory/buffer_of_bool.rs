// The device may write any bytes into a buffer: its values must be `DeviceCopy` (every bit
// pattern valid), which `bool` is not.
use cuda_stream::{Context, DeviceBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let flags = DeviceBuffer::<bool>::alloc(&ctx, 16)?;
    println!("{}", flags.len());
    Ok(())
}

// A borrowed buffer cannot outlive what keeps the foreign memory allocated: the owner passed to
// `from_raw` is borrowed for the buffer's lifetime, so dropping it first does not compile.
use cuda_stream::{BorrowedBuffer, Context, DeviceBuffer};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let tensor = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    let view = cuda_stream::AsStream::as_stream(&stream);
    // SAFETY: the tensor holds 16 f32 and is used only on `stream`.
    let borrowed =
        unsafe { BorrowedBuffer::<f32>::from_raw(&ctx, tensor.device_ptr(), 16, view, &tensor)? };
    drop(tensor);
    borrowed.fill(&stream, 1.0)?;
    Ok(())
}

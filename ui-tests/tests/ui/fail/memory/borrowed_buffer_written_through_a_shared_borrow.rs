// A kernel that writes a borrowed buffer takes it by `&mut` (`write`), so no read of it can be
// held across the launch's argument list, as for an owned buffer.
use cuda_stream::{BorrowedBuffer, Context, DeviceBuffer, kernel_args};

fn main() -> cuda_stream::Result<()> {
    let ctx = Context::primary(0)?;
    let stream = ctx.new_stream()?;
    let tensor = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 16)?;
    let view = cuda_stream::AsStream::as_stream(&stream);
    // SAFETY: the tensor holds 16 f32 and is used only on `stream`.
    let mut x =
        unsafe { BorrowedBuffer::<f32>::from_raw(&ctx, tensor.device_ptr(), 16, view, &tensor)? };
    let _args = kernel_args![x.read(), x.write()];
    Ok(())
}

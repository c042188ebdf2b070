// A view of a foreign handle, borrowed with `Stream::borrow_raw(raw, &owner)`, must not outlive
// the owner it names.
use cuda_stream::Stream;

/// Stands for a framework object (a PyTorch or CuPy stream) that owns the handle.
struct ForeignStream {
    handle: usize,
}

fn main() -> cuda_stream::Result<()> {
    let view: Stream<'_>;
    {
        let foreign = ForeignStream { handle: 0x1000 };
        // SAFETY: the handle stays live while `foreign` does (the point of the test is that
        // the compiler enforces the "while `foreign` does" part).
        view = unsafe { Stream::borrow_raw(foreign.handle as _, &foreign) }?;
    }
    view.synchronize()
}

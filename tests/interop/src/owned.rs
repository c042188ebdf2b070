//! Rust-owned streams handed to the caller: created in a device's primary context, kept in a
//! registry by handle, waited on and checked, and destroyed.

use std::sync::{Arc, Mutex};

use cuda_stream::{Context, OwnedStream};
use cuda_stream_sys as sys;

use crate::args::{element_count, write_out};
use crate::error::{
    CSI_ERR_INVALID_ARGUMENT, CSI_ERR_MISMATCH, CSI_ERR_UNKNOWN_HANDLE, Fail, check, ffi_call,
};
use crate::lock;

/// Streams created by `csi_stream_create` and not yet destroyed.
static OWNED: Mutex<Vec<Arc<OwnedStream>>> = Mutex::new(Vec::new());

fn find_owned(handle: usize) -> Result<Arc<OwnedStream>, Fail> {
    lock(&OWNED)
        .iter()
        .find(|s| s.raw() as usize == handle)
        .cloned()
        .ok_or_else(|| {
            Fail::new(
                CSI_ERR_UNKNOWN_HANDLE,
                format!(
                    "{handle:#x} is not a stream csi_stream_create returned (or it was destroyed)"
                ),
            )
        })
}

/// Creates a non-blocking Rust-owned stream in device `device`'s primary context and writes its
/// raw handle to `handle_out`, for a framework to borrow. It lives until [`csi_stream_destroy`].
///
/// # Safety
/// `handle_out` must be null (an error) or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_stream_create(device: i32, handle_out: *mut usize) -> i32 {
    ffi_call(|| {
        if handle_out.is_null() {
            return Err(Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                "handle_out is a null pointer",
            ));
        }
        let ordinal = usize::try_from(device).map_err(|_| {
            Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                format!("device {device} is negative"),
            )
        })?;
        let ctx = Context::primary(ordinal)?;
        let stream = Arc::new(ctx.new_stream()?);
        let handle = stream.raw() as usize;
        lock(&OWNED).push(stream);
        // SAFETY: `handle_out` is not null and the caller promises it is writable.
        unsafe { write_out(handle_out, handle, "handle_out") }
    })
}

/// Waits for all work enqueued on the Rust-owned stream `handle` (by anyone, such as a framework
/// that borrowed it), then copies `n` 32-bit words from `dptr` to the host and checks that each
/// equals `expected`: 0 if all do, `CSI_ERR_MISMATCH` (with the first differences in
/// `csi_last_error`) otherwise.
///
/// # Safety
/// `dptr` must be device memory readable for `n` words, accessible from the stream's context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_stream_wait_and_check(
    handle: usize,
    dptr: u64,
    n: u64,
    expected: u32,
) -> i32 {
    ffi_call(|| {
        let n = element_count(n)?;
        let stream = find_owned(handle)?;
        stream.synchronize()?;
        if n == 0 {
            return Ok(());
        }
        let mut host = vec![0u32; n];
        {
            let _bound = stream.context().bind()?;
            // SAFETY: `host` is writable for `4 * n` bytes; the caller vouches for `dptr`; the
            // stream's context is current.
            let rc = unsafe { sys::cuMemcpyDtoH(host.as_mut_ptr().cast(), dptr, 4 * n) };
            check(rc, "cuMemcpyDtoH")?;
        }
        let mut wrong = host
            .iter()
            .enumerate()
            .filter(|&(_, &v)| v != expected)
            .peekable();
        if wrong.peek().is_none() {
            return Ok(());
        }
        let first: Vec<String> = wrong
            .clone()
            .take(4)
            .map(|(i, v)| format!("[{i}] = {v}"))
            .collect();
        let count = wrong.count();
        Err(Fail::new(
            CSI_ERR_MISMATCH,
            format!(
                "{count} of {n} elements differ from {expected}: {}",
                first.join(", ")
            ),
        ))
    })
}

/// Destroys a stream from [`csi_stream_create`] (`cuStreamDestroy`); work already enqueued still
/// completes.
///
/// # Safety
/// No framework may use the handle after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_stream_destroy(handle: usize) -> i32 {
    ffi_call(|| {
        let stream = {
            let mut owned = lock(&OWNED);
            let i = owned
                .iter()
                .position(|s| s.raw() as usize == handle)
                .ok_or_else(|| {
                    Fail::new(
                        CSI_ERR_UNKNOWN_HANDLE,
                        format!("{handle:#x} is not a stream csi_stream_create returned"),
                    )
                })?;
            owned.swap_remove(i)
        };
        match Arc::try_unwrap(stream) {
            Ok(stream) => Ok(stream.close()?),
            // Another thread is mid-call with it: the last clone to drop destroys it.
            Err(_) => Ok(()),
        }
    })
}

//! A C ABI over `cuda-stream`, for proving interop with PyTorch, CuPy and cuda.core from Python
//! (`tests/interop/test_interop.py` loads it with ctypes).
//!
//! Every function borrows the caller's stream handle as a [`Stream<'_>`](cuda_stream::Stream)
//! through [`Stream::borrow_raw`](cuda_stream::Stream::borrow_raw) for the duration of the call
//! and enqueues real GPU work on it, or hands a Rust-owned stream to the caller.
//!
//! ```c
//! int32_t csi_fill_u32(uintptr_t stream, uint64_t dptr, uint64_t n, uint32_t value);
//! int32_t csi_add_u32(uintptr_t stream, uint64_t dptr, uint64_t n, uint32_t addend);
//! int32_t csi_borrowed_copy_u32(uintptr_t owner, uint64_t src, uint64_t dst, uint64_t n);
//! int32_t csi_record_event(uintptr_t stream, uintptr_t *event_out);
//! int32_t csi_destroy_event(uintptr_t event);
//! int32_t csi_wait_event(uintptr_t stream, uintptr_t event);
//! int32_t csi_stream_device(uintptr_t stream, int32_t *device_out);
//! int32_t csi_stream_create(int32_t device, uintptr_t *handle_out);
//! int32_t csi_stream_wait_and_check(uintptr_t handle, uint64_t dptr, uint64_t n, uint32_t expected);
//! int32_t csi_stream_destroy(uintptr_t handle);
//! int32_t csi_capture_status(uintptr_t stream, int32_t *status_out, uint64_t *id_out);
//! int32_t csi_capture_add_and_count(uintptr_t stream, uint64_t dptr, uint64_t n, uint32_t addend);
//! uint64_t csi_host_fn_runs(void);
//! uint64_t csi_host_fns_alive(void);
//! const char *csi_last_error(void);
//! ```
//!
//! The capture entry points serve a framework's graph capture (`with torch.cuda.graph(g):`):
//! `csi_capture_status` reports the stream's status (0 none, 1 active, 2 invalidated) from the
//! handle; `csi_capture_add_and_count` enqueues, into the capture the stream is part of, the add
//! kernel and a host function that counts its runs (`csi_host_fn_runs`, process-wide) on every
//! replay. `csi_host_fns_alive` counts those host functions not yet freed: the framework's graph
//! owns them, and frees them when it is destroyed.
//!
//! A stream handle of 0x0, 0x1 or 0x2 (what `torch.cuda.current_stream().cuda_stream` gives for
//! PyTorch's default stream) names a default stream of the context current on the calling
//! thread, which must be a primary context.
//!
//! With the `nccl` feature, `int32_t csi_nccl_all_reduce_u32(uintptr_t stream, uint64_t dptr,
//! uint64_t n, uint32_t value)` runs an NCCL all-reduce (one rank) on the borrowed stream.
//!
//! Every function returns 0 on success; otherwise the `CUresult` of a failed driver call
//! (positive) or one of the negative `CSI_ERR_*` codes, and [`csi_last_error`] describes it.

mod args;
mod borrow;
mod capture;
mod error;
mod events;
mod memory;
mod owned;
mod work;
// The NCCL entry point (feature `nccl`).
#[cfg(feature = "nccl")]
mod nccl;

use std::sync::{Mutex, MutexGuard};

pub use borrow::csi_stream_device;
pub use capture::{
    csi_capture_add_and_count, csi_capture_status, csi_host_fn_runs, csi_host_fns_alive,
};
pub use error::{
    CSI_ERR_CONTEXT, CSI_ERR_INVALID_ARGUMENT, CSI_ERR_MISMATCH, CSI_ERR_NO_DRIVER,
    CSI_ERR_NOT_CAPTURING, CSI_ERR_OTHER, CSI_ERR_PANIC, CSI_ERR_UNKNOWN_HANDLE, csi_last_error,
};
pub use events::{csi_destroy_event, csi_record_event, csi_wait_event};
pub use memory::csi_borrowed_copy_u32;
pub use owned::{csi_stream_create, csi_stream_destroy, csi_stream_wait_and_check};
pub use work::{csi_add_u32, csi_fill_u32};

#[cfg(feature = "nccl")]
pub use nccl::csi_nccl_all_reduce_u32;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    fn last_error() -> String {
        // SAFETY: `csi_last_error` returns a live NUL-terminated string owned by this thread.
        unsafe { std::ffi::CStr::from_ptr(csi_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn unknown_rust_handle_is_rejected_without_touching_the_driver() {
        // SAFETY: an unknown handle is looked up in the registry only.
        let rc = unsafe { csi_stream_wait_and_check(0xdead_beef, 0, 0, 0) };
        assert_eq!(rc, CSI_ERR_UNKNOWN_HANDLE);
        assert!(last_error().contains("0xdeadbeef"), "{}", last_error());
        // SAFETY: as above.
        let rc = unsafe { csi_stream_destroy(0xdead_beef) };
        assert_eq!(rc, CSI_ERR_UNKNOWN_HANDLE);
    }

    #[test]
    fn null_out_pointers_are_rejected() {
        // SAFETY: a null out-pointer is checked before the stream is touched.
        let rc = unsafe { csi_record_event(0x1234, ptr::null_mut()) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
        assert!(last_error().contains("event_out"), "{}", last_error());
        // SAFETY: as above.
        let rc = unsafe { csi_stream_device(0x1234, ptr::null_mut()) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
        // SAFETY: as above.
        let rc = unsafe { csi_stream_create(0, ptr::null_mut()) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
        // SAFETY: as above.
        let rc = unsafe { csi_capture_status(0x1234, ptr::null_mut(), ptr::null_mut()) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
        // SAFETY: a null event is rejected before the driver is called.
        let rc = unsafe { csi_destroy_event(0) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
        // SAFETY: as above.
        let rc = unsafe { csi_wait_event(0x1234, 0) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
    }

    #[test]
    fn success_clears_the_last_error() {
        // SAFETY: unknown handle, registry only.
        unsafe { csi_stream_destroy(1) };
        assert!(!last_error().is_empty());
        let mut h = 0usize;
        // SAFETY: `h` is writable; with no driver this fails cleanly.
        let rc = unsafe { csi_stream_create(0, &mut h) };
        if rc != 0 {
            eprintln!("skipped: no CUDA device: {}", last_error());
            return;
        }
        assert_eq!(last_error(), "");
        // SAFETY: `h` came from csi_stream_create.
        assert_eq!(unsafe { csi_stream_destroy(h) }, 0);
    }
}

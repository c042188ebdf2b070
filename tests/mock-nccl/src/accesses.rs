//! What the fake NCCL reports to the test driver's race detector: the memory each collective
//! reads and writes on its stream, through the hook a test installs (the driver's
//! `cuda_mock_stream_access`).

use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use cuda_stream_sys::nccl::ncclDataType_t;

/// The memory one call touches on its stream: (address, bytes, written).
pub(crate) struct Work {
    pub(crate) name: &'static CStr,
    pub(crate) stream: usize,
    pub(crate) accesses: Vec<(u64, usize, bool)>,
}

/// The test driver's `cuda_mock_stream_access`, if a test installed it (0: none).
pub(crate) static HOOK: AtomicUsize = AtomicUsize::new(0);

type Hook = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    usize,
    *const u64,
    *const usize,
    *const u8,
) -> u32;

/// Reports `work` to the test driver (nothing without a hook).
pub(crate) fn report(work: Vec<Work>) {
    let h = HOOK.load(Ordering::Acquire);
    if h == 0 {
        return;
    }
    // SAFETY: the address of `cuda_mock_stream_access`, with this signature
    // (`MockNccl::set_access_hook`'s contract).
    let hook: Hook = unsafe { std::mem::transmute::<usize, Hook>(h) };
    for w in work {
        let ptrs: Vec<u64> = w.accesses.iter().map(|a| a.0).collect();
        let lens: Vec<usize> = w.accesses.iter().map(|a| a.1).collect();
        let writes: Vec<u8> = w.accesses.iter().map(|a| u8::from(a.2)).collect();
        // SAFETY: three arrays of `len` entries and a NUL-terminated name, for the call.
        let _ = unsafe {
            hook(
                w.stream as *mut c_void,
                w.name.as_ptr(),
                ptrs.len(),
                ptrs.as_ptr(),
                lens.as_ptr(),
                writes.as_ptr(),
            )
        };
    }
}

/// The size of one value of `datatype` (0 for an unknown one).
pub(crate) fn type_size(datatype: ncclDataType_t) -> usize {
    match datatype.0 {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => 0,
    }
}

/// The memory a collective reads and writes on each buffer: the buffer and its size in values
/// of the datatype (given the communicator's size), and whether it is written.
pub(crate) type Shape = fn(nranks: usize, count: usize) -> [(usize, bool); 2];

/// Reads `count` values, writes `count` values (all-reduce, broadcast).
pub(crate) fn same(_: usize, count: usize) -> [(usize, bool); 2] {
    [(count, false), (count, true)]
}

/// Reads `count` values, writes `count` from every rank (all-gather).
pub(crate) fn gather(nranks: usize, count: usize) -> [(usize, bool); 2] {
    [(count, false), (count * nranks, true)]
}

/// Reads `count` values for every rank, writes `count` (reduce-scatter).
pub(crate) fn scatter(nranks: usize, count: usize) -> [(usize, bool); 2] {
    [(count * nranks, false), (count, true)]
}

/// Reads `count` values (send).
pub(crate) fn read_only(_: usize, count: usize) -> [(usize, bool); 2] {
    [(count, false), (0, false)]
}

/// Writes `count` values (recv).
pub(crate) fn write_only(_: usize, count: usize) -> [(usize, bool); 2] {
    [(count, true), (0, false)]
}

//! `cuGetProcAddress` and `cuGetProcAddress_v2`, and the table of every driver function's address
//! they hand out: the top of the exports, above every function it lists.

use std::ffi::{c_char, c_int, c_void};
use std::sync::LazyLock;

use cuda_stream_sys::{
    CUdriverProcAddress_flags, CUdriverProcAddressQueryResult, CUresult, cuuint64_t,
};

use super::call::{INVALID_VALUE, SUCCESS, c_str, entry_point, put};
use super::capture::*;
use super::contexts::*;
use super::devices::*;
use super::events::*;
use super::graph_nodes::*;
use super::graphs::*;
use super::init::*;
use super::kernels::*;
use super::launch_ex::*;
use super::managed::*;
use super::memory::*;
use super::peers::*;
use super::pools::*;
use super::streams::*;
use super::user_objects::*;
use crate::base::flavour::{self, driver_function_list};

/// `cuGetProcAddress_v2` (CUDA 12.0): the mock's function for `symbol` (a base name such as
/// `cuStreamDestroy`) of the newest ABI no newer than `cuda_version` that this flavour exports;
/// with `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`, its per-thread variant if there is one.
/// As the driver documents: `CUDA_ERROR_INVALID_VALUE` for a version above the driver's; a
/// function it does not have is `CUDA_SUCCESS` with a null pointer, and `symbol_status` says
/// `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`, or `_VERSION_NOT_SUFFICIENT` when only newer ABIs
/// exist. Needs no `cuInit`.
///
/// # Safety
///
/// `symbol` is null or a NUL-terminated string; `pfn` and `symbol_status` are each null or valid
/// for a write.
#[cfg_attr(exported = "cuGetProcAddress_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: cuuint64_t,
    symbol_status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    get_proc_address(
        "cuGetProcAddress_v2",
        symbol,
        pfn,
        cuda_version,
        flags,
        symbol_status,
    )
}

/// `cuGetProcAddress` (CUDA 11.3): as `_v2`, without the status, and `CUDA_ERROR_NOT_FOUND` for a
/// function it does not have.
///
/// # Safety
///
/// `symbol` is null or a NUL-terminated string; `pfn` is null or valid for a write.
#[cfg_attr(exported = "cuGetProcAddress", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: cuuint64_t,
) -> CUresult {
    get_proc_address(
        "cuGetProcAddress",
        symbol,
        pfn,
        cuda_version,
        flags,
        std::ptr::null_mut(),
    )
}

fn get_proc_address(
    entry: &'static str,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: cuuint64_t,
    symbol_status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    type Flags = CUdriverProcAddress_flags;
    type Status = CUdriverProcAddressQueryResult;
    entry_point(entry, |st| {
        // SAFETY: the caller's promise.
        let base = unsafe { c_str(symbol) };
        let known = Flags::CU_GET_PROC_ADDRESS_LEGACY_STREAM.0
            | Flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0;
        let (Some(base), false, false) = (base, pfn.is_null(), flags & !u64::from(known) != 0)
        else {
            return INVALID_VALUE;
        };
        if cuda_version > st.version {
            return INVALID_VALUE;
        }
        let per_thread =
            flags & u64::from(Flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0) != 0;
        let address = flavour::proc_address(base, cuda_version, per_thread).and_then(|symbol| {
            driver_functions()
                .iter()
                .find(|(name, _)| *name == symbol)
                .map(|(_, address)| *address)
                .ok_or(Status::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        });
        let (found, status) = match address {
            Ok(address) => (address as *mut c_void, Status::CU_GET_PROC_ADDRESS_SUCCESS),
            Err(status) => (std::ptr::null_mut(), status),
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pfn, found) };
        if !symbol_status.is_null() {
            // SAFETY: as above.
            unsafe { put(symbol_status, status) };
        }
        if found.is_null() && entry == "cuGetProcAddress" {
            CUresult::CUDA_ERROR_NOT_FOUND
        } else {
            SUCCESS
        }
    })
}

/// Every driver function the mock implements, by exported symbol, with its address: what
/// `cuGetProcAddress` can hand out (of those this flavour exports). Every export with
/// `cfg_attr(exported = ..)` belongs here.
/// Every driver function the mock implements, by exported symbol, with its address: what
/// `cuGetProcAddress` can hand out (of those this flavour exports). The list is
/// `base::flavour::driver_function_list`.
pub(crate) fn driver_functions() -> &'static [(&'static str, usize)] {
    macro_rules! table {
        ($($f:ident),* $(,)?) => {
            vec![$((stringify!($f), $f as *const () as usize)),*]
        };
    }
    static TABLE: LazyLock<Vec<(&'static str, usize)>> =
        LazyLock::new(|| driver_function_list!(table));
    &TABLE
}

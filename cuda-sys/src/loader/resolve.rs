//! Resolving a binding to a function pointer, on first use: the ABI limit, then the driver's
//! `cuGetProcAddress` at the binding's ABI version, then the exported name; cached per slot.

use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::ptr;
use std::sync::atomic::Ordering;

use super::{Driver, LoadError, SymbolInfo};
use crate::generated::symbols::SYMBOLS;
use crate::generated::types::{
    CUdriverProcAddress_flags, CUdriverProcAddressQueryResult, CUresult, cuuint64_t,
};

/// A slot value meaning "looked up, and the driver does not have it".
const MISSING: *mut c_void = ptr::dangling_mut::<c_void>();

/// How a [`Driver`] turns a binding into a function pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resolver {
    /// The driver's `cuGetProcAddress_v2` (CUDA 12.0 and later), then the exported name.
    ProcAddressV2,
    /// The driver's four-argument `cuGetProcAddress` (CUDA 11.3 to 11.8), then the exported name.
    ProcAddress,
    /// The exported name only: the driver has no `cuGetProcAddress` (before CUDA 11.3).
    SymbolLookup,
}

impl fmt::Display for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Resolver::ProcAddressV2 => "cuGetProcAddress_v2",
            Resolver::ProcAddress => "cuGetProcAddress",
            Resolver::SymbolLookup => "symbol lookup",
        })
    }
}

pub(super) type GetProcAddressV2 = unsafe extern "C" fn(
    *const c_char,
    *mut *mut c_void,
    c_int,
    cuuint64_t,
    *mut CUdriverProcAddressQueryResult,
) -> CUresult;
pub(super) type GetProcAddressV1 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, cuuint64_t) -> CUresult;

#[derive(Clone, Copy)]
pub(super) enum ProcAddress {
    V2(GetProcAddressV2),
    V1(GetProcAddressV1),
    None,
}

impl Driver {
    /// How this driver's bindings are resolved.
    pub fn resolver(&self) -> Resolver {
        match self.proc_address {
            ProcAddress::V2(_) => Resolver::ProcAddressV2,
            ProcAddress::V1(_) => Resolver::ProcAddress,
            ProcAddress::None => Resolver::SymbolLookup,
        }
    }

    /// Whether the driver has the binding `name` (resolving it if needed).
    pub fn has(&self, name: &str) -> bool {
        self.address(name).is_some_and(|r| r.is_ok())
    }

    /// The address of the binding `name`, resolving it if needed, as its typed accessor would
    /// (`driver.address("cuInit")` is `driver.cuInit()` as a pointer); `None` if the bindings
    /// have no such name. Cast it only to the binding's [`pfn`](crate::pfn) type.
    pub fn address(&self, name: &str) -> Option<Result<*mut c_void, LoadError>> {
        let index = SYMBOLS.iter().position(|s| s.name == name)?;
        Some(self.symbol(index))
    }

    /// The pointer in slot `index`, resolving it on first use.
    #[inline(always)]
    pub(crate) fn symbol(&self, index: usize) -> Result<*mut c_void, LoadError> {
        let p = self.slots[index].load(Ordering::Acquire);
        if p as usize > MISSING as usize {
            Ok(p)
        } else {
            self.resolve(index)
        }
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self, index: usize) -> Result<*mut c_void, LoadError> {
        let info = &SYMBOLS[index];
        let mut p = self.slots[index].load(Ordering::Acquire);
        if p.is_null() {
            p = self.look_up(info).unwrap_or(MISSING);
            // Racing resolvers store the same value.
            self.slots[index].store(p, Ordering::Release);
        }
        if p == MISSING {
            return Err(self.missing_error(info));
        }
        Ok(p)
    }

    /// Whether a binding of ABI `since` may be handed out.
    fn allows(&self, since: u32) -> bool {
        since == 0 || since <= self.abi_version()
    }

    /// The binding's function, if the driver has its ABI and the limit allows it.
    fn look_up(&self, info: &SymbolInfo) -> Option<*mut c_void> {
        if !self.allows(info.since) {
            return None;
        }
        if info.since != 0 {
            if let Some(p) = self.proc_address(info) {
                return Some(p);
            }
        }
        // SAFETY: the symbol is only used as an opaque address here; its type is restored by
        // the generated accessor that knows the C signature of this exported name.
        let found = unsafe { self.lib.get::<*mut c_void>(info.symbol.to_bytes_with_nul()) };
        found.ok().map(|s| *s).filter(|p| !p.is_null())
    }

    /// Asks the driver's `cuGetProcAddress` for `info`'s ABI.
    fn proc_address(&self, info: &SymbolInfo) -> Option<*mut c_void> {
        let flags = if info.per_thread {
            CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
        } else {
            CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_DEFAULT
        };
        let flags = cuuint64_t::from(flags.0);
        let version = c_int::try_from(info.since).ok()?;
        let mut p = ptr::null_mut();
        let rc = match self.proc_address {
            // SAFETY: a NUL-terminated name, valid out-pointers, and a version no newer than
            // the driver's (`allows` checked it); cuGetProcAddress needs no cuInit.
            ProcAddress::V2(f) => unsafe {
                let mut status = CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS;
                f(info.base.as_ptr(), &mut p, version, flags, &mut status)
            },
            // SAFETY: as above.
            ProcAddress::V1(f) => unsafe { f(info.base.as_ptr(), &mut p, version, flags) },
            ProcAddress::None => return None,
        };
        // Not found is CUDA_SUCCESS with a null pointer (v2) or CUDA_ERROR_NOT_FOUND (v1).
        (rc == CUresult::CUDA_SUCCESS && !p.is_null()).then_some(p)
    }

    fn missing_error(&self, info: &SymbolInfo) -> LoadError {
        let driver = self.driver_version;
        // The configured limit is the reason when the driver itself is new enough.
        let abi_limit = self.abi_limit.filter(|l| {
            info.since > *l
                && driver.is_none_or(|d| u32::try_from(d).is_ok_and(|d| info.since <= d))
        });
        LoadError::MissingSymbol {
            name: info.name,
            symbol: info.symbol.to_str().unwrap_or(info.name),
            since: info.since,
            driver_version: driver,
            abi_limit: abi_limit.map(|l| l as i32),
        }
    }
}

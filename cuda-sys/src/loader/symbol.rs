//! [`SymbolInfo`]: what the bindings table records of each binding (name, exported symbol, base
//! name and ABI version for `cuGetProcAddress`, per-thread flag).

use std::ffi::CStr;

use crate::generated::symbols::SYMBOLS;

/// One binding: one ABI of one driver function.
///
/// The bindings are the names C code writes, each meaning the ABI the pinned header maps it to
/// (`cuEventElapsedTime` is the CUDA 12.8 ABI, symbol `cuEventElapsedTime_v2`), the per-thread
/// default-stream variants under their exported names (`cuMemcpyHtoDAsync_v2_ptsz`), and for every
/// function with more than one ABI, each ABI under the suffix of its `cudaTypedefs.h` typedef
/// (`cuEventElapsedTime_v2000` and `cuEventElapsedTime_v12080`, `cuStreamGetCaptureInfo_v10010_ptsz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SymbolInfo {
    /// The binding's name, such as `cuStreamDestroy` or `cuEventElapsedTime_v2000`.
    pub name: &'static str,
    /// The exported symbol of this ABI, such as `cuStreamDestroy_v2`; looked up by name when the
    /// driver has no `cuGetProcAddress`.
    pub symbol: &'static CStr,
    /// The name `cuGetProcAddress` knows the function by, such as `cuStreamDestroy`.
    pub base: &'static CStr,
    /// The CUDA version (`1000 * major + 10 * minor`) of this ABI, from its `cudaTypedefs.h`
    /// typedef: the version asked of `cuGetProcAddress`, and the oldest driver that has it. 0
    /// where the typedefs do not record it (such a binding is never version-limited).
    pub since: u32,
    /// A per-thread default-stream variant (`_ptds`, `_ptsz`), asked of `cuGetProcAddress` with
    /// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
    pub per_thread: bool,
}

impl SymbolInfo {
    /// Looks a binding up by name.
    pub fn find(name: &str) -> Option<&'static SymbolInfo> {
        SYMBOLS.iter().find(|s| s.name == name)
    }

    /// Every binding, sorted by name.
    pub fn all() -> &'static [SymbolInfo] {
        &SYMBOLS
    }

    /// Every ABI of the function `name` stands for (the bindings with its base name and
    /// per-thread flag, deduplicated by exported symbol), oldest first.
    pub fn abis(name: &str) -> Vec<&'static SymbolInfo> {
        let Some(me) = Self::find(name) else {
            return Vec::new();
        };
        let mut v: Vec<&'static SymbolInfo> = SYMBOLS
            .iter()
            .filter(|s| s.base == me.base && s.per_thread == me.per_thread)
            .collect();
        v.sort_by_key(|s| (s.since, s.symbol));
        v.dedup_by_key(|s| s.symbol);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every binding's type is its ABI's `cudaTypedefs.h` typedef.
    #[test]
    fn every_binding_has_the_signature_of_its_typedef() {
        use crate::generated::functions::PFN_TYPES;
        let wrong: Vec<_> = PFN_TYPES
            .iter()
            .filter(|(_, _, binding, typedef)| binding() != typedef())
            .map(|(name, pfn, _, _)| format!("{name} is not {pfn}"))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
        // Every binding with a recorded ABI is checked, every versioned variant among them.
        let checked: Vec<&str> = PFN_TYPES.iter().map(|t| t.0).collect();
        for s in SymbolInfo::all() {
            assert_eq!(s.since != 0, checked.contains(&s.name), "{s:?}");
            let suffix = s.name.strip_prefix(s.base.to_str().unwrap());
            if let Some(v) = suffix.and_then(|x| x.strip_prefix("_v")) {
                let v = v.trim_end_matches("_ptsz").trim_end_matches("_ptds");
                if v.len() >= 4 {
                    assert_eq!(v.parse::<u32>().ok(), Some(s.since), "{s:?}");
                }
            }
        }
        // The check can fail: two ABIs of one function with different signatures differ.
        use crate::generated::functions::pfn;
        use crate::generated::typedefs;
        use core::any::TypeId;
        assert_ne!(
            TypeId::of::<Option<pfn::cuCtxCreate_v3020>>(),
            TypeId::of::<typedefs::PFN_cuCtxCreate_v11040>()
        );
        assert_ne!(
            TypeId::of::<Option<pfn::cuMemGetInfo_v2000>>(),
            TypeId::of::<typedefs::PFN_cuMemGetInfo_v3020>()
        );
        assert_eq!(
            TypeId::of::<Option<pfn::cuEventElapsedTime_v2000>>(),
            TypeId::of::<typedefs::PFN_cuEventElapsedTime_v2000>()
        );
    }
}

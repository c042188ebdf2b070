//! Writing the generated files' text: `functions.rs` (the `pfn`, `fns`, `Driver` and C-shaped
//! items, and the typedef check), `symbols.rs`, `typedefs.rs` and `results.rs`.

use std::fmt::Write as _;

use crate::abi::Function;
use crate::bindgen_run::item_name;

pub(crate) fn emit_results(banner: &str, results: &[(String, u32, String)]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{banner}");
    s.push_str("use super::types::CUresult;\n\n");
    s.push_str(
        "/// `(value, name, description)` of every `CUresult` the header defines, by value.\n",
    );
    let mut sorted: Vec<_> = results.iter().collect();
    sorted.sort_by_key(|r| r.1);
    sorted.dedup_by_key(|r| r.1);
    let _ = writeln!(
        s,
        "pub(crate) static RESULTS: [(u32, &str, &str); {}] = [",
        sorted.len()
    );
    for (name, value, doc) in sorted {
        let _ = writeln!(s, "    ({value}, {name:?}, {doc:?}),");
    }
    s.push_str("];\n\n");
    s.push_str("#[allow(dead_code)]\nconst _: CUresult = CUresult::CUDA_SUCCESS;\n");
    s
}

/// `symbols.rs`: the table of every binding, as plain data (no `use`), so that a build script
/// can `include!` it with its own `SymbolInfo` of the same fields (the mock driver's does).
pub(crate) fn emit_symbols(banner: &str, functions: &[Function]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{banner}");
    let _ = writeln!(
        s,
        "/// How many driver functions the bindings cover.\npub const SYMBOL_COUNT: usize = {};\n",
        functions.len()
    );
    s.push_str(
        "/// Every binding: its name, the exported symbol, the name and ABI version to ask\n\
         /// `cuGetProcAddress` for (the CUDA version, `1000 * major + 10 * minor`, of the\n\
         /// `cudaTypedefs.h` typedef; 0 where there is none), and whether it is a per-thread\n\
         /// default-stream variant. Sorted by name.\n",
    );
    let _ = writeln!(s, "pub static SYMBOLS: [SymbolInfo; SYMBOL_COUNT] = [");
    for f in functions {
        let _ = writeln!(
            s,
            "    SymbolInfo {{ name: {:?}, symbol: c{:?}, base: c{:?}, since: {}, per_thread: {} }},",
            f.name, f.symbol, f.base, f.since, f.per_thread
        );
    }
    s.push_str("];\n");
    s
}

/// `typedefs.rs`: `cudaTypedefs.h`'s function-pointer typedefs, as bindgen writes them.
pub(crate) fn emit_typedefs(banner: &str, items: Vec<syn::ItemType>) -> String {
    let mut items: Vec<syn::Item> = items
        .into_iter()
        .map(|mut t| {
            t.attrs.retain(|a| !a.path().is_ident("doc"));
            syn::Item::Type(t)
        })
        .collect();
    items.sort_by_key(|i| item_name(i).unwrap_or_default());
    let file = syn::File {
        shebang: None,
        attrs: Vec::new(),
        items,
    };
    format!(
        "{banner}\nuse super::types::*;\n\n{}",
        prettyplease::unparse(&file)
    )
}

/// The ABI a binding stands for, in words: `symbol `cuX_v2`, the CUDA 12.8 ABI`.
fn abi_words(f: &Function) -> String {
    let mut s = format!("symbol `{}`", f.symbol);
    if f.since != 0 {
        let _ = write!(
            s,
            ", the CUDA {}.{} ABI",
            f.since / 1000,
            (f.since % 1000) / 10
        );
    }
    if f.per_thread {
        s.push_str(", per-thread default stream");
    }
    s
}

pub(crate) fn emit_functions(banner: &str, functions: &[Function]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{banner}");
    s.push_str(
        "use super::types::*;\n\
         use crate::loader::{Driver, LoadError, global_symbol};\n\
         use core::ffi::c_void;\n\n",
    );

    s.push_str("/// Function-pointer types of the driver functions, named as the bindings name them: the C\n/// name for the ABI the header means, `<name>_v<version>` for each ABI of a function that has\n/// several (the suffix of its `cudaTypedefs.h` typedef).\npub mod pfn {\n    use super::*;\n");
    for f in functions {
        let params: Vec<String> = f
            .sig
            .params
            .iter()
            .map(|(n, t)| format!("{n}: {t}"))
            .collect();
        let _ = writeln!(
            s,
            "    /// `{}` ({}).\n    pub type {} = unsafe extern \"C\" fn({}) -> {};",
            f.name,
            abi_words(f),
            f.name,
            params.join(", "),
            f.sig.ret
        );
    }
    s.push_str("}\n\n");

    s.push_str("/// Fallible accessors for the process-wide driver's functions: the first call of each\n/// resolves its symbol, later calls load the cached pointer.\npub mod fns {\n    use super::*;\n");
    for (i, f) in functions.iter().enumerate() {
        let _ = writeln!(
            s,
            "    /// The process-wide driver's `{name}` ({abi}).\n    #[inline(always)]\n    pub fn {name}() -> Result<pfn::{name}, LoadError> {{\n        let p = global_symbol({i})?;\n        // SAFETY: slot {i} holds `{sym}`, whose C type `pfn::{name}` mirrors.\n        Ok(unsafe {{ core::mem::transmute::<*mut c_void, pfn::{name}>(p) }})\n    }}",
            name = f.name,
            sym = f.symbol,
            abi = abi_words(f),
        );
    }
    s.push_str("}\n\n");

    s.push_str("impl Driver {\n");
    for (i, f) in functions.iter().enumerate() {
        let _ = writeln!(
            s,
            "    /// This driver's `{name}` ({abi}).\n    #[inline]\n    pub fn {name}(&self) -> Result<pfn::{name}, LoadError> {{\n        let p = self.symbol({i})?;\n        // SAFETY: slot {i} holds `{sym}`, whose C type `pfn::{name}` mirrors.\n        Ok(unsafe {{ core::mem::transmute::<*mut c_void, pfn::{name}>(p) }})\n    }}",
            name = f.name,
            sym = f.symbol,
            abi = abi_words(f),
        );
    }
    s.push_str("}\n\n");

    for f in functions {
        let params: Vec<String> = f
            .sig
            .params
            .iter()
            .map(|(n, t)| format!("{n}: {t}"))
            .collect();
        let args: Vec<&str> = f.sig.params.iter().map(|(n, _)| n.as_str()).collect();
        let fail = if f.sig.ret == "CUresult" {
            "Err(e) => e.to_cuda_result(),".to_string()
        } else {
            return_default_for(&f.sig.ret)
        };
        let _ = writeln!(
            s,
            "/// `{name}` from the process-wide driver ({abi}). If the driver or the symbol\n/// cannot be loaded it returns the code of [`LoadError::to_cuda_result`]; [`fns::{name}`]\n/// gives the reason.\n///\n/// # Safety\n/// The C contract of `{name}`: see the CUDA driver API documentation.\n#[inline]\npub unsafe fn {name}({params}) -> {ret} {{\n    match fns::{name}() {{\n        // SAFETY: the caller upholds the C contract of `{name}`.\n        Ok(driver_fn) => unsafe {{ driver_fn({args}) }},\n        {fail}\n    }}\n}}\n",
            name = f.name,
            abi = abi_words(f),
            params = params.join(", "),
            ret = f.sig.ret,
            args = args.join(", "),
        );
    }

    // The signature check: each binding's type against its ABI's `cudaTypedefs.h` typedef.
    let checked: Vec<&Function> = functions.iter().filter(|f| f.pfn.is_some()).collect();
    let _ = writeln!(
        s,
        "/// `(binding, typedef, the binding's type, the typedef's type)` for every binding whose ABI\n/// `cudaTypedefs.h` describes; a test checks that the types are the same.\n#[cfg(test)]\npub(crate) static PFN_TYPES: [(&str, &str, fn() -> core::any::TypeId, fn() -> core::any::TypeId); {}] = [",
        checked.len()
    );
    for f in checked {
        let pfn = f.pfn.as_deref().unwrap_or_default();
        let _ = writeln!(
            s,
            "    ({name:?}, {pfn:?}, core::any::TypeId::of::<Option<pfn::{name}>>, core::any::TypeId::of::<super::typedefs::{pfn}>),",
            name = f.name,
        );
    }
    s.push_str("];\n");
    s
}

fn return_default_for(ret: &str) -> String {
    format!("Err(_) => <{ret}>::default(),")
}

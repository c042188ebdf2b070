//! The bindings of a library beside the driver (NCCL, NVRTC), which has one ABI per exported
//! name: bindgen's types as they come, and every function as a function-pointer type in `pfn`,
//! an entry of the table of exported names, and an accessor on the library's loader type that
//! resolves it by name on first use.

use std::fmt::Write as _;

use crate::Result;
use crate::abi::{Signature, signature_of_fn};
use crate::bindgen_run::strip_docs;

/// How the generated file names the library and its loader.
pub(crate) struct Library {
    /// The library's name in documentation (`NCCL`).
    pub(crate) title: &'static str,
    /// The prefix of the table's constants (`NCCL` for `NCCL_SYMBOL_COUNT`).
    pub(crate) prefix: &'static str,
    /// The loader type (`Nccl`), whose accessors are generated.
    pub(crate) loader: &'static str,
    /// The loader's error type (`NcclLoadError`).
    pub(crate) error: &'static str,
}

/// The functions of a header: each C name with its signature, sorted by name.
pub(crate) type Functions = Vec<(String, Signature)>;

/// Bindgen's output split into its items (docs stripped) and its functions.
pub(crate) fn split(file: syn::File) -> Result<(Vec<syn::Item>, Functions)> {
    let mut items = Vec::new();
    let mut functions = Vec::new();
    for item in file.items {
        match item {
            syn::Item::ForeignMod(fm) => {
                for fi in fm.items {
                    if let syn::ForeignItem::Fn(f) = fi {
                        functions.push((f.sig.ident.to_string(), signature_of_fn(&f)?));
                    }
                }
            }
            mut other => {
                strip_docs(&mut other);
                items.push(other);
            }
        }
    }
    functions.sort_by(|a, b| a.0.cmp(&b.0));
    Ok((items, functions))
}

/// Appends the types, the `pfn` module, the table of exported names and the accessors.
pub(crate) fn emit(
    s: &mut String,
    lib: &Library,
    items: Vec<syn::Item>,
    functions: &[(String, Signature)],
) {
    let types = syn::File {
        shebang: None,
        attrs: Vec::new(),
        items,
    };
    s.push_str(&prettyplease::unparse(&types));
    let _ = writeln!(
        s,
        "\n/// Function-pointer types of the {} functions, by their C names.\npub mod pfn {{\n    use super::*;",
        lib.title
    );
    for (name, sig) in functions {
        let params: Vec<String> = sig
            .params
            .iter()
            .map(|(n, t)| format!("{n}: {t}"))
            .collect();
        let _ = writeln!(
            s,
            "    /// `{name}`.\n    pub type {name} = unsafe extern \"C\" fn({}) -> {};",
            params.join(", "),
            sig.ret
        );
    }
    s.push_str("}\n\n");
    let (title, prefix) = (lib.title, lib.prefix);
    let _ = writeln!(
        s,
        "/// How many {title} functions the bindings cover.\npub(crate) const {prefix}_SYMBOL_COUNT: usize = {};\n\n/// The exported name of every {title} function, sorted.\npub(crate) static {prefix}_SYMBOLS: [&core::ffi::CStr; {prefix}_SYMBOL_COUNT] = [",
        functions.len()
    );
    for (name, _) in functions {
        let _ = writeln!(s, "    c{name:?},");
    }
    let _ = writeln!(s, "];\n\nimpl {} {{", lib.loader);
    for (i, (name, _)) in functions.iter().enumerate() {
        let _ = writeln!(
            s,
            "    /// This library's `{name}`.\n    #[inline]\n    pub fn {name}(&self) -> Result<pfn::{name}, {}> {{\n        let p = self.symbol({i})?;\n        // SAFETY: slot {i} holds `{name}`, whose C type `pfn::{name}` mirrors.\n        Ok(unsafe {{ core::mem::transmute::<*mut c_void, pfn::{name}>(p) }})\n    }}",
            lib.error
        );
    }
    s.push_str("}\n");
}

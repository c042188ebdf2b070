//! `nvrtc.rs`: the NVRTC bindings, from the pinned `nvrtc.h` of the NVRTC wheel of CUDA 13.0.
//!
//! `nvrtc.h` is plain C apart from `nvrtcGetTypeName`, a C++ template behind a macro that a C
//! build never sees. Every `nvrtc*` function becomes a function-pointer type and an accessor on
//! `Nvrtc`, resolved by its exported name (NVRTC has one ABI per name), and the `nvrtcResult`
//! enumerators a table of names, so that an error is named without loading NVRTC.

use std::fmt::Write as _;
use std::path::Path;

use crate::Result;
use crate::bindgen_run::{styled, tokens};
use crate::header::{NVRTC_HEADER_SHA256, nvrtc_banner};
use crate::library::{Library, emit, split};
use crate::sha256::sha256_hex;

const NVRTC: Library = Library {
    title: "NVRTC",
    prefix: "NVRTC",
    loader: "Nvrtc",
    error: "NvrtcLoadError",
};

pub(crate) fn generate_nvrtc(include: &Path) -> Result<Vec<(String, String)>> {
    let header = include.join("nvrtc.h");
    let text =
        std::fs::read_to_string(&header).map_err(|e| format!("{}: {e}", header.display()))?;
    let sum = sha256_hex(text.as_bytes());
    if sum != NVRTC_HEADER_SHA256 {
        return Err(format!(
            "{}: sha256 {sum} is not the pinned header's {NVRTC_HEADER_SHA256}",
            header.display()
        ));
    }
    let bindings = styled(
        bindgen::Builder::default()
            .header(header.to_string_lossy())
            .allowlist_function("nvrtc.*")
            .allowlist_type("nvrtc.*"),
        false,
    )
    .generate()
    .map_err(|e| format!("bindgen (nvrtc.h): {e}"))?;
    let file: syn::File = syn::parse_str(&bindings.to_string())
        .map_err(|e| format!("parsing bindgen output: {e}"))?;
    let results = result_names(&file)?;
    let (items, functions) = split(file)?;

    let mut s = nvrtc_banner();
    s.push_str("\nuse crate::nvrtc::{Nvrtc, NvrtcLoadError};\nuse core::ffi::c_void;\n\n");
    emit(&mut s, &NVRTC, items, &functions);
    let _ = writeln!(
        s,
        "\n/// `(value, name)` of every `nvrtcResult` the header defines, by value.\npub(crate) static NVRTC_RESULTS: [(u32, &str); {}] = [",
        results.len()
    );
    for (value, name) in &results {
        let _ = writeln!(s, "    ({value}, {name:?}),");
    }
    s.push_str("];\n");
    Ok(vec![("nvrtc.rs".into(), s)])
}

/// The enumerators of `nvrtcResult` (`impl nvrtcResult { pub const X: nvrtcResult =
/// nvrtcResult(6); }` in bindgen's output), sorted by value.
fn result_names(file: &syn::File) -> Result<Vec<(u32, String)>> {
    let mut out = Vec::new();
    for item in &file.items {
        let syn::Item::Impl(i) = item else { continue };
        if tokens(&i.self_ty) != "nvrtcResult" {
            continue;
        }
        for ii in &i.items {
            let syn::ImplItem::Const(c) = ii else {
                continue;
            };
            let name = c.ident.to_string();
            let value = match &c.expr {
                syn::Expr::Call(call) => match call.args.first() {
                    Some(syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Int(v),
                        ..
                    })) => v.base10_parse::<u32>().ok(),
                    _ => None,
                },
                _ => None,
            };
            let value = value.ok_or_else(|| format!("nvrtcResult::{name}: not a number"))?;
            out.push((value, name));
        }
    }
    if out.is_empty() {
        return Err("nvrtc.h: no nvrtcResult enumerators".into());
    }
    out.sort();
    Ok(out)
}

//! Bindings and their ABIs: C signatures, `cudaTypedefs.h`'s `PFN_cuX_v<version>` typedefs, how
//! exported symbols (`cuX_v2_ptsz`) and `#define`d C names split into base name, ABI number and
//! per-thread suffix, and comparing signatures through type aliases.

use std::collections::{BTreeMap, HashMap};

use crate::Result;
use crate::bindgen_run::tokens;

/// A C function's parameters (`name: Type`, as bindgen wrote them) and return type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Signature {
    pub(crate) params: Vec<(String, String)>,
    pub(crate) ret: String,
}

/// One `PFN_cuX_v12080` (or `PFN_cuX_v7000_ptsz`) typedef of `cudaTypedefs.h`: one ABI of a
/// driver function.
#[derive(Debug, Clone)]
pub(crate) struct Pfn {
    /// The typedef's name.
    pub(crate) typedef: String,
    /// The name to ask `cuGetProcAddress` for (`cuX`).
    pub(crate) base: String,
    /// The ABI's CUDA version (`1000 * major + 10 * minor`).
    pub(crate) version: u32,
    /// `""`, `"_ptds"` or `"_ptsz"`.
    pub(crate) per_thread: &'static str,
    pub(crate) sig: Signature,
}

/// One binding as the generated code exposes it.
#[derive(Debug, Clone)]
pub(crate) struct Function {
    /// The binding's name: the name a C programmer writes (`cuStreamDestroy`), or for an older
    /// ABI kept reachable, the base name and the PFN suffix (`cuEventElapsedTime_v2000`).
    pub(crate) name: String,
    /// The exported symbol (`cuStreamDestroy_v2`).
    pub(crate) symbol: String,
    /// The name `cuGetProcAddress` knows the function by (`cuStreamDestroy`).
    pub(crate) base: String,
    /// A `_ptds` / `_ptsz` variant, asked for with the per-thread flag.
    pub(crate) per_thread: bool,
    pub(crate) sig: Signature,
    /// The CUDA version of this ABI, from `cudaTypedefs.h` (0: not recorded there).
    pub(crate) since: u32,
    /// The `cudaTypedefs.h` typedef of this ABI.
    pub(crate) pfn: Option<String>,
}

pub(crate) fn signature_of_fn(f: &syn::ForeignItemFn) -> Result<Signature> {
    let symbol = f.sig.ident.to_string();
    let mut params = Vec::new();
    for input in &f.sig.inputs {
        if let syn::FnArg::Typed(pt) = input {
            params.push((tokens(&pt.pat), tokens(&pt.ty)));
        } else {
            return Err(format!("{symbol}: unexpected receiver"));
        }
    }
    if f.sig.variadic.is_some() {
        return Err(format!("{symbol}: variadic functions are not supported"));
    }
    let ret = match &f.sig.output {
        syn::ReturnType::Default => "()".to_string(),
        syn::ReturnType::Type(_, t) => tokens(t),
    };
    Ok(Signature { params, ret })
}

/// `pub type PFN_cuX_v2000 = Option<unsafe extern "C" fn(..) -> CUresult>;`
pub(crate) fn parse_pfn(t: &syn::ItemType) -> Result<Pfn> {
    let typedef = t.ident.to_string();
    let err = || format!("{typedef}: not a function pointer typedef");
    let syn::Type::Path(p) = &*t.ty else {
        return Err(err());
    };
    let last = p.path.segments.last().ok_or_else(err)?;
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return Err(err());
    };
    let Some(syn::GenericArgument::Type(syn::Type::BareFn(f))) = args.args.first() else {
        return Err(err());
    };
    let params = f
        .inputs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let name = a
                .name
                .as_ref()
                .map_or_else(|| format!("arg{i}"), |(n, _)| n.to_string());
            (name, tokens(&a.ty))
        })
        .collect();
    let ret = match &f.output {
        syn::ReturnType::Default => "()".to_string(),
        syn::ReturnType::Type(_, t) => tokens(t),
    };
    let name = typedef.strip_prefix("PFN_").ok_or_else(err)?;
    let (name, per_thread) = split_per_thread(name);
    let (base, version) = name.rsplit_once("_v").ok_or_else(err)?;
    let version = version.parse::<u32>().map_err(|_| err())?;
    Ok(Pfn {
        typedef: typedef.clone(),
        base: base.to_string(),
        version,
        per_thread,
        sig: Signature { params, ret },
    })
}

/// `cuX_v2_ptsz` -> (`cuX`, 2, `_ptsz`); `cuX` -> (`cuX`, 1, ``).
pub(crate) fn split_symbol(symbol: &str) -> (&str, u32, &'static str) {
    let (rest, pt) = split_per_thread(symbol);
    match rest.rsplit_once("_v") {
        Some((base, n)) if !n.is_empty() && n.len() <= 2 => match n.parse::<u32>() {
            Ok(n) => (base, n, pt),
            Err(_) => (rest, 1, pt),
        },
        _ => (rest, 1, pt),
    }
}

/// `cuX_v2_ptsz` -> (`cuX_v2`, `_ptsz`); other names unchanged, with an empty suffix.
fn split_per_thread(name: &str) -> (&str, &'static str) {
    for suffix in ["_ptds", "_ptsz"] {
        if let Some(rest) = name.strip_suffix(suffix) {
            return (rest, suffix);
        }
    }
    (name, "")
}

/// Whether two signatures have the same parameter and return types once type aliases are
/// expanded (`CUdevice` and `CUdevice_v1` are both `c_int`); parameter names do not count.
pub(crate) fn same_types(a: &Signature, b: &Signature, aliases: &HashMap<String, String>) -> bool {
    let expand = |t: &str| expand_aliases(t, aliases);
    a.params.len() == b.params.len()
        && expand(&a.ret) == expand(&b.ret)
        && a.params
            .iter()
            .zip(&b.params)
            .all(|((_, x), (_, y))| expand(x) == expand(y))
}

fn expand_aliases(ty: &str, aliases: &HashMap<String, String>) -> String {
    let mut cur = ty.to_string();
    for _ in 0..16 {
        let mut out = String::new();
        let mut word = String::new();
        let flush = |word: &mut String, out: &mut String| {
            if !word.is_empty() {
                match aliases.get(word.as_str()) {
                    Some(t) => out.push_str(t),
                    None => out.push_str(word),
                }
                word.clear();
            }
        };
        for c in cur.chars() {
            if c.is_ascii_alphanumeric() || c == '_' {
                word.push(c);
            } else {
                flush(&mut word, &mut out);
                out.push(c);
            }
        }
        flush(&mut word, &mut out);
        if out == cur {
            break;
        }
        cur = out;
    }
    cur.replace(' ', "")
}

/// `#define cuX cuX_v2` and `#define cuX __CUDA_API_PTDS(cuX_v2)` lines: the names C code writes
/// and the symbols they stand for in a default (non per-thread) build.
pub(crate) fn parse_aliases(header: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in header.lines() {
        let mut words = line.split_whitespace();
        let (Some(hash), Some(name), Some(target)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        if hash != "#define" || !name.starts_with("cu") || words.next().is_some() {
            continue;
        }
        let target = target
            .strip_prefix("__CUDA_API_PTDS(")
            .or_else(|| target.strip_prefix("__CUDA_API_PTSZ("))
            .and_then(|t| t.strip_suffix(')'))
            .unwrap_or(target);
        let ident = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if target != name && target.starts_with("cu") && ident(target) && ident(name) {
            // Some names are redefined inside per-thread blocks; the first, default one wins.
            map.entry(name.to_string())
                .or_insert_with(|| target.to_string());
        }
    }
    map
}

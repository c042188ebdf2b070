//! `generate`: the three bindgen runs, matching each `cudaTypedefs.h` typedef to its exported
//! symbol, the list of bindings (C names and versioned variants), and the files' text.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use crate::Result;
use crate::abi::{
    Function, Pfn, Signature, parse_aliases, parse_pfn, same_types, signature_of_fn, split_symbol,
};
use crate::bindgen_run::{
    collect_results, collect_type_aliases, item_name, run_bindgen, strip_docs, tokens,
};
use crate::emit::{emit_functions, emit_results, emit_symbols, emit_typedefs};
use crate::header::{HEADER_SHA256, banner};
use crate::sha256::sha256_hex;

/// What `generate` produces besides the files: the choices a reader of the output may want
/// to check, printed by the `report` mode.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) lines: Vec<String>,
}

pub(crate) fn generate(include: &Path) -> Result<(Vec<(String, String)>, Report)> {
    let header = include.join("cuda.h");
    let header_text =
        std::fs::read_to_string(&header).map_err(|e| format!("{}: {e}", header.display()))?;
    let sum = sha256_hex(header_text.as_bytes());
    if sum != HEADER_SHA256 {
        return Err(format!(
            "{}: sha256 {sum} is not the pinned header's {HEADER_SHA256}",
            header.display()
        ));
    }
    let typedefs_h = include.join("cudaTypedefs.h");
    if !typedefs_h.is_file() {
        return Err(format!("{}: missing", typedefs_h.display()));
    }
    let include_arg = format!("-I{}", include.display());
    let mut report = Report::default();

    let file = run_bindgen(&header, &[], false)?;
    // The same header as a per-thread-default-stream build sees it: its `_ptds` / `_ptsz`
    // functions are part of the API too, bound under their exported names.
    let per_thread = run_bindgen(&header, &["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"], false)?;
    // cudaTypedefs.h (and through it cuda.h) as the driver's own build sees them: every ABI's
    // typedef, and the declarations of the older exported symbols (`cuEventElapsedTime`,
    // `cuCtxCreate_v2`, ...). `_ODR` keeps the enums as a default build has them.
    let internal = run_bindgen(
        &typedefs_h,
        &[
            &include_arg,
            "-D__CUDA_API_VERSION_INTERNAL",
            "-D__CUDA_API_VERSION_INTERNAL_ODR",
        ],
        true,
    )?;

    let aliases = parse_aliases(&header_text);

    let mut type_items = Vec::new();
    let mut default_fns = Vec::new();
    let mut results = Vec::new();
    // Every exported symbol any of the three runs declares, with its signature.
    let mut decls: BTreeMap<String, Signature> = BTreeMap::new();
    let mut add_decl = |f: &syn::ForeignItemFn| -> Result<String> {
        let symbol = f.sig.ident.to_string();
        let sig = signature_of_fn(f)?;
        // Parameter names may differ between declarations; the first one's are kept.
        match decls.get(&symbol) {
            Some(old) if !same_types(old, &sig, &HashMap::new()) => {
                return Err(format!("{symbol}: declared twice, differently"));
            }
            Some(_) => {}
            None => {
                decls.insert(symbol.clone(), sig);
            }
        }
        Ok(symbol)
    };
    for item in per_thread.items {
        if let syn::Item::ForeignMod(fm) = item {
            for fi in fm.items {
                if let syn::ForeignItem::Fn(f) = fi {
                    let name = f.sig.ident.to_string();
                    if name.ends_with("_ptds") || name.ends_with("_ptsz") {
                        default_fns.push(add_decl(&f)?);
                    }
                }
            }
        }
    }
    let mut default_type_tokens = HashMap::new();
    for item in file.items {
        match item {
            syn::Item::ForeignMod(fm) => {
                for fi in fm.items {
                    if let syn::ForeignItem::Fn(f) = fi {
                        default_fns.push(add_decl(&f)?);
                    }
                }
            }
            mut other => {
                collect_results(&other, &mut results);
                strip_docs(&mut other);
                default_type_tokens.insert(tokens(&other), item_name(&other));
                type_items.push(other);
            }
        }
    }
    let default_names: HashSet<String> = default_type_tokens.values().flatten().cloned().collect();

    // The internal run: the older symbols' declarations, the PFN typedefs, and the types only
    // the older ABIs use (`CUDA_MEMCPY2D_v1`, ...), appended to the default build's types.
    let mut pfn_items = Vec::new();
    let mut extra_types = Vec::new();
    for item in internal.items {
        match item {
            syn::Item::ForeignMod(fm) => {
                for fi in fm.items {
                    if let syn::ForeignItem::Fn(f) = fi {
                        add_decl(&f)?;
                    }
                }
            }
            syn::Item::Type(t) if t.ident.to_string().starts_with("PFN_") => pfn_items.push(t),
            mut other => {
                strip_docs(&mut other);
                if default_type_tokens.contains_key(&tokens(&other)) {
                    continue;
                }
                if let Some(name) = item_name(&other) {
                    if default_names.contains(&name) {
                        return Err(format!(
                            "{name}: the driver's internal view of cuda.h defines it differently"
                        ));
                    }
                }
                extra_types.push(other);
            }
        }
    }
    report.lines.push(format!(
        "{} types only the older ABIs use",
        extra_types
            .iter()
            .filter(|i| item_name(i).is_some())
            .count()
    ));
    type_items.extend(extra_types);

    let type_aliases = collect_type_aliases(&type_items);
    let mut pfns = Vec::new();
    for t in &pfn_items {
        pfns.push(parse_pfn(t)?);
    }

    // Which exported symbol each PFN typedef describes. The symbols of one function are
    // `cuX`, `cuX_v2`, `cuX_v3`, ... (each with the same `_ptds`/`_ptsz` suffix as its typedef)
    // in the order of their ABI versions; they are matched newest to newest, and each pair's
    // parameter types must agree.
    let mut symbols_by_group: BTreeMap<(String, &str), Vec<(u32, String)>> = BTreeMap::new();
    for symbol in decls.keys() {
        let (base, n, pt) = split_symbol(symbol);
        symbols_by_group
            .entry((base.to_string(), pt))
            .or_default()
            .push((n, symbol.clone()));
    }
    let mut pfns_by_group: BTreeMap<(String, &str), Vec<Pfn>> = BTreeMap::new();
    for p in &pfns {
        pfns_by_group
            .entry((p.base.clone(), p.per_thread))
            .or_default()
            .push(p.clone());
    }
    // exported symbol -> its PFN.
    let mut pfn_of: HashMap<String, Pfn> = HashMap::new();
    let mut unmatched_pfns = Vec::new();
    for (group, list) in &mut pfns_by_group {
        list.sort_by_key(|p| p.version);
        let mut syms = symbols_by_group.get(group).cloned().unwrap_or_default();
        syms.sort();
        let mut s = syms.iter().rev();
        for p in list.iter().rev() {
            match s.next() {
                Some((_, symbol)) => {
                    let decl = &decls[symbol];
                    if !same_types(decl, &p.sig, &type_aliases) {
                        return Err(format!(
                            "{symbol} does not have the signature of {}: {decl:?} vs {:?}",
                            p.typedef, p.sig
                        ));
                    }
                    pfn_of.insert(symbol.clone(), p.clone());
                }
                None => unmatched_pfns.push(p.typedef.clone()),
            }
        }
    }
    if !unmatched_pfns.is_empty() {
        report.lines.push(format!(
            "typedefs whose exported symbol cuda.h does not declare (not bound): {}",
            unmatched_pfns.join(", ")
        ));
    }

    // symbol -> the C name that maps to it (identity when no #define renames it).
    let mut by_symbol: HashMap<String, String> = HashMap::new();
    for (name, target) in &aliases {
        by_symbol.insert(target.clone(), name.clone());
    }
    let binding = |name: String, symbol: &str| -> Function {
        let sig = decls[symbol].clone();
        match pfn_of.get(symbol) {
            Some(p) => Function {
                name,
                symbol: symbol.to_string(),
                base: p.base.clone(),
                per_thread: !p.per_thread.is_empty(),
                sig,
                since: p.version,
                pfn: Some(p.typedef.clone()),
            },
            None => {
                let (base, _, pt) = split_symbol(symbol);
                Function {
                    name,
                    symbol: symbol.to_string(),
                    base: base.to_string(),
                    per_thread: !pt.is_empty(),
                    sig,
                    since: 0,
                    pfn: None,
                }
            }
        }
    };
    let mut functions = Vec::new();
    let mut without_pfn = Vec::new();
    for symbol in &default_fns {
        let name = by_symbol
            .get(symbol)
            .cloned()
            .unwrap_or_else(|| symbol.clone());
        let f = binding(name, symbol);
        if f.pfn.is_none() {
            without_pfn.push(f.name.clone());
        }
        functions.push(f);
    }
    if !without_pfn.is_empty() {
        report.lines.push(format!(
            "functions without a typedef (ABI version 0, resolved by their exported name): {}",
            without_pfn.join(", ")
        ));
    }
    // Every ABI of a function that has more than one, under the typedef's suffix.
    let mut variants = 0;
    for ((base, pt), list) in &pfns_by_group {
        let matched: Vec<&Pfn> = list
            .iter()
            .filter(|p| pfn_of.values().any(|q| q.typedef == p.typedef))
            .collect();
        if matched.len() < 2 {
            continue;
        }
        for p in matched {
            let symbol = pfn_of
                .iter()
                .find(|(_, q)| q.typedef == p.typedef)
                .map(|(s, _)| s.clone())
                .expect("matched above");
            let name = format!("{base}_v{}{pt}", p.version);
            if functions.iter().any(|f| f.name == name) {
                return Err(format!("{name}: a C name and an ABI variant collide"));
            }
            functions.push(binding(name, &symbol));
            variants += 1;
        }
    }
    report.lines.push(format!(
        "{} bindings: {} C names, {variants} versioned variants",
        functions.len(),
        default_fns.len()
    ));
    functions.sort_by(|a, b| a.name.cmp(&b.name));

    let banner = banner();
    let types_file = syn::File {
        shebang: None,
        attrs: Vec::new(),
        items: type_items,
    };
    let types = format!("{banner}\n{}", prettyplease::unparse(&types_file));
    let funcs = emit_functions(&banner, &functions);
    let results = emit_results(&banner, &results);
    let typedefs = emit_typedefs(&banner, pfn_items);
    let symbols = emit_symbols(&banner, &functions);
    Ok((
        vec![
            ("types.rs".into(), types),
            ("functions.rs".into(), funcs),
            ("symbols.rs".into(), symbols),
            ("results.rs".into(), results),
            ("typedefs.rs".into(), typedefs),
        ],
        report,
    ))
}

//! Generates `cuda-sys/src/generated/` from a pinned `cuda.h`.
//!
//! ```text
//! cargo run -p build-support -- generate [--include DIR]
//! cargo run -p build-support -- check    [--include DIR]
//! ```
//!
//! Without `--include` (or `CUDA_INCLUDE_DIR`), the header comes from the pinned NVIDIA runtime
//! wheel, fetched with `pip download` into `.header-cache/` and checked against its sha256. Either
//! way the header itself must match [`HEADER_SHA256`]: the committed bindings name it.
//!
//! `check` regenerates into a temporary folder and fails on any difference with what is
//! committed, so the bindings cannot drift from the generator.
//!
//! Three bindgen runs feed it: `cuda.h` as a default build sees it (the types and the C names),
//! as a per-thread-default-stream build sees it (the `_ptds` / `_ptsz` functions), and
//! `cudaTypedefs.h` as the driver's own build sees it (`__CUDA_API_VERSION_INTERNAL`): every
//! `PFN_cuX_v<version>` typedef, the declarations of the older exported symbols, and the few
//! types only those use. Each typedef is matched to its exported symbol (`cuX`, `cuX_v2`, ... in
//! ABI order, newest to newest, parameter types checked), which gives every binding its ABI
//! version, and every ABI of a function with several becomes a binding of its own
//! (`cuX_v<version>`). The files: `types.rs`, `functions.rs` (the `pfn`, `fns`, `Driver` and
//! C-shaped items), `symbols.rs` (the table of bindings, plain data), `typedefs.rs`, `results.rs`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The header's `CUDA_VERSION` and where it comes from.
const HEADER_VERSION: &str = "13.0 (nvidia-cuda-runtime 13.0.96)";
const WHEEL_NAME: &str = "nvidia-cuda-runtime";
const WHEEL_VERSION: &str = "13.0.96";
const WHEEL_FILE: &str =
    "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl";
const WHEEL_SHA256: &str = "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548";
const WHEEL_INCLUDE: &str = "nvidia/cu13/include";
/// sha256 of the pinned `cuda.h`.
const HEADER_SHA256: &str = "64025f81a9d6d2b10e9e11654f3523e5b046d01b883f0b9ca474e463274b80d4";
/// Must match the exact version pinned in `build-support/Cargo.toml`.
const BINDGEN_VERSION: &str = "0.72.1";
const REGENERATE: &str = "cargo run -p build-support -- generate";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("build-support: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T, E = String> = std::result::Result<T, E>;

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let mut include = std::env::var_os("CUDA_INCLUDE_DIR").map(PathBuf::from);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--include" => include = Some(args.next().ok_or("--include needs a folder")?.into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let root = workspace_root();
    let include = match include {
        Some(dir) => dir,
        None => fetch_wheel(&root)?,
    };
    let out_dir = root.join("cuda-sys/src/generated");
    match mode.as_str() {
        "generate" => {
            let (files, report) = generate(&include)?;
            for line in &report.lines {
                println!("{line}");
            }
            for (name, text) in &files {
                std::fs::write(out_dir.join(name), text).map_err(|e| format!("{name}: {e}"))?;
            }
            println!("wrote {} files to {}", files.len(), out_dir.display());
            Ok(())
        }
        "check" => {
            let (files, _) = generate(&include)?;
            let tmp = std::env::temp_dir().join(format!("cuda-sys-check-{}", std::process::id()));
            std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
            let mut stale = Vec::new();
            for (name, text) in &files {
                std::fs::write(tmp.join(name), text).map_err(|e| e.to_string())?;
                let committed = std::fs::read_to_string(out_dir.join(name)).unwrap_or_default();
                if committed != *text {
                    stale.push(name.clone());
                    let _ = Command::new("diff")
                        .arg("-u")
                        .arg(out_dir.join(name))
                        .arg(tmp.join(name))
                        .status();
                }
            }
            let _ = std::fs::remove_dir_all(&tmp);
            if stale.is_empty() {
                println!("bindings are current ({} files)", files.len());
                Ok(())
            } else {
                Err(format!(
                    "stale generated files: {stale:?}; run `{REGENERATE}`"
                ))
            }
        }
        _ => Err("usage: build-support (generate|check) [--include DIR]".into()),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("build-support sits inside the workspace")
        .to_path_buf()
}

/// Downloads the pinned wheel (once), checks it, and unpacks its include folder.
fn fetch_wheel(root: &Path) -> Result<PathBuf> {
    let cache = root.join(".header-cache");
    let wheel = cache.join(WHEEL_FILE);
    if !wheel.exists() {
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
            ])
            .args([
                "--platform",
                "manylinux2014_x86_64",
                "--python-version",
                "3.11",
            ])
            .arg("-d")
            .arg(&cache)
            .arg(format!("{WHEEL_NAME}=={WHEEL_VERSION}"))
            .status()
            .map_err(|e| format!("python3 -m pip: {e}"))?;
        if !status.success() {
            return Err(format!("pip download {WHEEL_NAME}=={WHEEL_VERSION} failed"));
        }
    }
    let bytes = std::fs::read(&wheel).map_err(|e| format!("{}: {e}", wheel.display()))?;
    let sum = sha256_hex(&bytes);
    if sum != WHEEL_SHA256 {
        return Err(format!(
            "{WHEEL_FILE}: sha256 {sum}, expected {WHEEL_SHA256}"
        ));
    }
    let unpacked = cache.join("unpacked");
    let script = format!(
        "import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); \
         [z.extract(n, sys.argv[2]) for n in z.namelist() if n.startswith('{WHEEL_INCLUDE}/')]"
    );
    let status = Command::new("python3")
        .args(["-c", &script])
        .arg(&wheel)
        .arg(&unpacked)
        .status()
        .map_err(|e| format!("python3: {e}"))?;
    if !status.success() {
        return Err("unpacking the wheel failed".into());
    }
    Ok(unpacked.join(WHEEL_INCLUDE))
}

/// A C function's parameters (`name: Type`, as bindgen wrote them) and return type.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Signature {
    params: Vec<(String, String)>,
    ret: String,
}

/// One `PFN_cuX_v12080` (or `PFN_cuX_v7000_ptsz`) typedef of `cudaTypedefs.h`: one ABI of a
/// driver function.
#[derive(Debug, Clone)]
struct Pfn {
    /// The typedef's name.
    typedef: String,
    /// The name to ask `cuGetProcAddress` for (`cuX`).
    base: String,
    /// The ABI's CUDA version (`1000 * major + 10 * minor`).
    version: u32,
    /// `""`, `"_ptds"` or `"_ptsz"`.
    per_thread: &'static str,
    sig: Signature,
}

/// One binding as the generated code exposes it.
#[derive(Debug, Clone)]
struct Function {
    /// The binding's name: the name a C programmer writes (`cuStreamDestroy`), or for an older
    /// ABI kept reachable, the base name and the PFN suffix (`cuEventElapsedTime_v2000`).
    name: String,
    /// The exported symbol (`cuStreamDestroy_v2`).
    symbol: String,
    /// The name `cuGetProcAddress` knows the function by (`cuStreamDestroy`).
    base: String,
    /// A `_ptds` / `_ptsz` variant, asked for with the per-thread flag.
    per_thread: bool,
    sig: Signature,
    /// The CUDA version of this ABI, from `cudaTypedefs.h` (0: not recorded there).
    since: u32,
    /// The `cudaTypedefs.h` typedef of this ABI.
    pfn: Option<String>,
}

/// What `generate` produces besides the files: the choices a reader of the output may want
/// to check, printed by the `report` mode.
#[derive(Debug, Default)]
struct Report {
    lines: Vec<String>,
}

fn generate(include: &Path) -> Result<(Vec<(String, String)>, Report)> {
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

fn run_bindgen(header: &Path, clang_args: &[&str], typedefs: bool) -> Result<syn::File> {
    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_args(clang_args)
        .allowlist_function("cu.*")
        .allowlist_type("(CU|cu).*")
        .allowlist_var("CU.*");
    if typedefs {
        builder = builder.allowlist_type("PFN_cu.*");
    }
    let bindings = builder
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .use_core()
        .ctypes_prefix("::core::ffi")
        .generate_comments(true)
        .merge_extern_blocks(true)
        .layout_tests(true)
        .formatter(bindgen::Formatter::None)
        .generate()
        .map_err(|e| format!("bindgen: {e}"))?;
    syn::parse_str(&bindings.to_string()).map_err(|e| format!("parsing bindgen output: {e}"))
}

fn signature_of_fn(f: &syn::ForeignItemFn) -> Result<Signature> {
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
fn parse_pfn(t: &syn::ItemType) -> Result<Pfn> {
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
fn split_symbol(symbol: &str) -> (&str, u32, &'static str) {
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

/// The name an item defines, if it defines one.
fn item_name(item: &syn::Item) -> Option<String> {
    match item {
        syn::Item::Struct(s) => Some(s.ident.to_string()),
        syn::Item::Union(u) => Some(u.ident.to_string()),
        syn::Item::Enum(e) => Some(e.ident.to_string()),
        syn::Item::Type(t) => Some(t.ident.to_string()),
        syn::Item::Const(c) if c.ident != "_" => Some(c.ident.to_string()),
        _ => None,
    }
}

/// `type A = B;` items: A -> B's tokens.
fn collect_type_aliases(items: &[syn::Item]) -> HashMap<String, String> {
    items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Type(t) => Some((t.ident.to_string(), tokens(&t.ty))),
            _ => None,
        })
        .collect()
}

/// Whether two signatures have the same parameter and return types once type aliases are
/// expanded (`CUdevice` and `CUdevice_v1` are both `c_int`); parameter names do not count.
fn same_types(a: &Signature, b: &Signature, aliases: &HashMap<String, String>) -> bool {
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

fn banner() -> String {
    format!(
        "// @generated by build-support with bindgen {BINDGEN_VERSION} from cuda.h of CUDA \
         {HEADER_VERSION},\n// sha256 {HEADER_SHA256}.\n// Do not edit: regenerate with \
         `{REGENERATE}`; `build-support check` fails on drift.\n"
    )
}

fn tokens<T: quote::ToTokens>(t: &T) -> String {
    let s = t.to_token_stream().to_string();
    // Tidy the token spacing of types such as `* mut :: core :: ffi :: c_void`.
    s.replace(" :: ", "::")
        .replace(":: ", "::")
        .replace("* mut ", "*mut ")
        .replace("* const ", "*const ")
        .replace(" ,", ",")
        .replace("[ ", "[")
        .replace(" ]", "]")
        .replace(" ;", ";")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace("Option <", "Option<")
        .replace("unsafe extern \"C\" fn (", "unsafe extern \"C\" fn(")
}

/// `#define cuX cuX_v2` and `#define cuX __CUDA_API_PTDS(cuX_v2)` lines: the names C code writes
/// and the symbols they stand for in a default (non per-thread) build.
fn parse_aliases(header: &str) -> BTreeMap<String, String> {
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

/// Removes doc attributes (bindgen copies the header's comments, which are not valid rustdoc).
fn strip_docs(item: &mut syn::Item) {
    fn strip(attrs: &mut Vec<syn::Attribute>) {
        attrs.retain(|a| !a.path().is_ident("doc"));
    }
    match item {
        syn::Item::Struct(s) => {
            strip(&mut s.attrs);
            for f in s.fields.iter_mut() {
                strip(&mut f.attrs);
            }
        }
        syn::Item::Union(u) => {
            strip(&mut u.attrs);
            for f in u.fields.named.iter_mut() {
                strip(&mut f.attrs);
            }
        }
        syn::Item::Enum(e) => strip(&mut e.attrs),
        syn::Item::Type(t) => strip(&mut t.attrs),
        syn::Item::Const(c) => strip(&mut c.attrs),
        syn::Item::Impl(i) => {
            strip(&mut i.attrs);
            for ii in i.items.iter_mut() {
                if let syn::ImplItem::Const(c) = ii {
                    strip(&mut c.attrs);
                }
            }
        }
        _ => {}
    }
}

/// Collects `(name, value, description)` for every `CUresult` constant.
fn collect_results(item: &syn::Item, out: &mut Vec<(String, u32, String)>) {
    let syn::Item::Impl(imp) = item else { return };
    if tokens(&imp.self_ty) != "cudaError_enum" {
        return;
    }
    for ii in &imp.items {
        let syn::ImplItem::Const(c) = ii else {
            continue;
        };
        let name = c.ident.to_string();
        let value = match &c.expr {
            syn::Expr::Call(call) => call.args.first().map(tokens).unwrap_or_default(),
            e => tokens(e),
        };
        let value: u32 = value.trim().parse().unwrap_or(u32::MAX);
        let mut doc = String::new();
        for a in &c.attrs {
            if let syn::Meta::NameValue(nv) = &a.meta {
                if nv.path.is_ident("doc") {
                    if let syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) = &nv.value
                    {
                        doc.push_str(&s.value());
                        doc.push(' ');
                    }
                }
            }
        }
        let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        let doc = doc.replace("::", "");
        out.push((name, value, doc));
    }
}

fn emit_results(banner: &str, results: &[(String, u32, String)]) -> String {
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
fn emit_symbols(banner: &str, functions: &[Function]) -> String {
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
fn emit_typedefs(banner: &str, items: Vec<syn::ItemType>) -> String {
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

fn emit_functions(banner: &str, functions: &[Function]) -> String {
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

fn sha256_hex(data: &[u8]) -> String {
    let digest = sha256(data);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A small SHA-256 (FIPS 180-4), so that checking the pinned inputs needs no other crate.
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 64];
        for (i, word) in chunk.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let mut v = h;
        for i in 0..64 {
            let s1 = v[4].rotate_right(6) ^ v[4].rotate_right(11) ^ v[4].rotate_right(25);
            let ch = (v[4] & v[5]) ^ (!v[4] & v[6]);
            let t1 = v[7]
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = v[0].rotate_right(2) ^ v[0].rotate_right(13) ^ v[0].rotate_right(22);
            let maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
            let t2 = s0.wrapping_add(maj);
            v = [
                t1.wrapping_add(t2),
                v[0],
                v[1],
                v[2],
                v[3].wrapping_add(t1),
                v[4],
                v[5],
                v[6],
            ];
        }
        for (a, b) in h.iter_mut().zip(v) {
            *a = a.wrapping_add(b);
        }
    }
    let mut out = [0u8; 32];
    for (i, word) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&word.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn sha256_known_answer() {
        assert_eq!(
            super::sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

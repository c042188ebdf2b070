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

use std::collections::{BTreeMap, HashMap};
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
            let files = generate(&include)?;
            for (name, text) in &files {
                std::fs::write(out_dir.join(name), text).map_err(|e| format!("{name}: {e}"))?;
            }
            println!("wrote {} files to {}", files.len(), out_dir.display());
            Ok(())
        }
        "check" => {
            let files = generate(&include)?;
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

/// One driver function as the generated code exposes it.
struct Function {
    /// The name a C programmer writes (`cuStreamDestroy`).
    name: String,
    /// The exported symbol the header maps that name to (`cuStreamDestroy_v2`).
    symbol: String,
    /// `name: Type` pairs, as bindgen wrote them.
    params: Vec<(String, String)>,
    ret: String,
    /// The CUDA version that introduced this ABI, from `cudaTypedefs.h`.
    since: u32,
}

fn generate(include: &Path) -> Result<Vec<(String, String)>> {
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
    let typedefs = std::fs::read_to_string(include.join("cudaTypedefs.h")).unwrap_or_default();

    let file = run_bindgen(&header, &[])?;
    // The same header as a per-thread-default-stream build sees it: its `_ptds` / `_ptsz`
    // functions are part of the API too, bound under their exported names.
    let per_thread = run_bindgen(&header, &["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"])?;

    let aliases = parse_aliases(&header_text);
    let since = parse_since(&typedefs);

    let mut type_items = Vec::new();
    let mut raw_fns = Vec::new();
    let mut results = Vec::new();
    for item in per_thread.items {
        if let syn::Item::ForeignMod(fm) = item {
            for fi in fm.items {
                if let syn::ForeignItem::Fn(f) = fi {
                    let name = f.sig.ident.to_string();
                    if name.ends_with("_ptds") || name.ends_with("_ptsz") {
                        raw_fns.push(f);
                    }
                }
            }
        }
    }
    for item in file.items {
        match item {
            syn::Item::ForeignMod(fm) => {
                for fi in fm.items {
                    if let syn::ForeignItem::Fn(f) = fi {
                        raw_fns.push(f);
                    }
                }
            }
            mut other => {
                collect_results(&other, &mut results);
                strip_docs(&mut other);
                type_items.push(other);
            }
        }
    }

    // symbol -> the C name that maps to it (identity when no #define renames it).
    let mut by_symbol: HashMap<String, String> = HashMap::new();
    for (name, target) in &aliases {
        by_symbol.insert(target.clone(), name.clone());
    }
    let mut functions = Vec::new();
    for f in raw_fns {
        let symbol = f.sig.ident.to_string();
        let name = by_symbol
            .get(&symbol)
            .cloned()
            .unwrap_or_else(|| symbol.clone());
        let mut params = Vec::new();
        for input in &f.sig.inputs {
            if let syn::FnArg::Typed(pt) = input {
                let pat = tokens(&pt.pat);
                let ty = tokens(&pt.ty);
                params.push((pat, ty));
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
        let since = since_for(&since, &symbol, params.len());
        functions.push(Function {
            name,
            symbol,
            params,
            ret,
            since,
        });
    }
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
    Ok(vec![
        ("types.rs".into(), types),
        ("functions.rs".into(), funcs),
        ("results.rs".into(), results),
    ])
}

fn run_bindgen(header: &Path, clang_args: &[&str]) -> Result<syn::File> {
    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_args(clang_args)
        .allowlist_function("cu.*")
        .allowlist_type("(CU|cu).*")
        .allowlist_var("CU.*")
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

/// `PFN_cuX_v12080` typedefs: base name -> [(version, parameter count)].
fn parse_since(typedefs: &str) -> HashMap<String, Vec<(u32, usize)>> {
    let mut map: HashMap<String, Vec<(u32, usize)>> = HashMap::new();
    for line in typedefs.lines() {
        let Some(start) = line.find("(CUDAAPI *PFN_") else {
            continue;
        };
        let rest = &line[start + "(CUDAAPI *PFN_".len()..];
        let Some(end) = rest.find(')') else { continue };
        // `PFN_cuX_v7000_ptsz` is recorded under `cuX_ptsz`.
        let (pfn, per_thread) = split_per_thread(&rest[..end]);
        let Some((base, ver)) = pfn.rsplit_once("_v") else {
            continue;
        };
        let base = format!("{base}{per_thread}");
        let Ok(ver) = ver.parse::<u32>() else {
            continue;
        };
        let args = &rest[end + 1..];
        let nparams = if args.contains("(void)") {
            0
        } else {
            args.matches(',').count() + 1
        };
        map.entry(base).or_default().push((ver, nparams));
    }
    map
}

/// `cuX_v2_ptsz` -> (`cuX_v2`, `_ptsz`); other names unchanged, with an empty suffix.
fn split_per_thread(name: &str) -> (&str, &str) {
    for suffix in ["_ptds", "_ptsz"] {
        if let Some(rest) = name.strip_suffix(suffix) {
            return (rest, suffix);
        }
    }
    (name, "")
}

/// The version that introduced `symbol`'s ABI: for a suffixed symbol (`cuX_v2`) the newest
/// matching typedef, for a plain one the oldest; 0 when the typedefs do not say.
fn since_for(since: &HashMap<String, Vec<(u32, usize)>>, symbol: &str, nparams: usize) -> u32 {
    let (symbol, per_thread) = split_per_thread(symbol);
    let (base, suffixed) = match symbol.rsplit_once("_v") {
        Some((b, v)) if v.parse::<u32>().is_ok() => (b, true),
        _ => (symbol, false),
    };
    let Some(list) = since.get(&format!("{base}{per_thread}")) else {
        return 0;
    };
    let matching = list.iter().filter(|(_, n)| *n == nparams).map(|(v, _)| *v);
    if suffixed {
        matching.max().unwrap_or(0)
    } else {
        matching.min().unwrap_or(0)
    }
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

fn emit_functions(banner: &str, functions: &[Function]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{banner}");
    s.push_str(
        "use super::types::*;\n\
         use crate::loader::{Driver, LoadError, SymbolInfo, global_symbol};\n\
         use core::ffi::c_void;\n\n",
    );
    let _ = writeln!(
        s,
        "/// How many driver functions the bindings cover.\npub const SYMBOL_COUNT: usize = {};\n",
        functions.len()
    );
    s.push_str("/// Every function: the C name, the exported symbol it stands for, and the CUDA version\n/// (`1000 * major + 10 * minor`) that introduced that symbol (0: not recorded).\n");
    let _ = writeln!(s, "pub static SYMBOLS: [SymbolInfo; SYMBOL_COUNT] = [");
    for f in functions {
        let _ = writeln!(
            s,
            "    SymbolInfo {{ name: {:?}, symbol: c{:?}, since: {} }},",
            f.name, f.symbol, f.since
        );
    }
    s.push_str("];\n\n");

    s.push_str("/// Function-pointer types of the driver functions, named as C call sites name them.\npub mod pfn {\n    use super::*;\n");
    for f in functions {
        let params: Vec<String> = f.params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
        let _ = writeln!(
            s,
            "    /// `{}` (symbol `{}`).\n    pub type {} = unsafe extern \"C\" fn({}) -> {};",
            f.name,
            f.symbol,
            f.name,
            params.join(", "),
            f.ret
        );
    }
    s.push_str("}\n\n");

    s.push_str("/// Fallible accessors for the process-wide driver's functions: the first call of each\n/// resolves its symbol, later calls load the cached pointer.\npub mod fns {\n    use super::*;\n");
    for (i, f) in functions.iter().enumerate() {
        let _ = writeln!(
            s,
            "    /// The process-wide driver's `{name}`.\n    #[inline(always)]\n    pub fn {name}() -> Result<pfn::{name}, LoadError> {{\n        let p = global_symbol({i})?;\n        // SAFETY: slot {i} holds `{sym}`, whose C type `pfn::{name}` mirrors.\n        Ok(unsafe {{ core::mem::transmute::<*mut c_void, pfn::{name}>(p) }})\n    }}",
            name = f.name,
            sym = f.symbol
        );
    }
    s.push_str("}\n\n");

    s.push_str("impl Driver {\n");
    for (i, f) in functions.iter().enumerate() {
        let _ = writeln!(
            s,
            "    /// This driver's `{name}` (symbol `{sym}`).\n    #[inline]\n    pub fn {name}(&self) -> Result<pfn::{name}, LoadError> {{\n        let p = self.symbol({i})?;\n        // SAFETY: slot {i} holds `{sym}`, whose C type `pfn::{name}` mirrors.\n        Ok(unsafe {{ core::mem::transmute::<*mut c_void, pfn::{name}>(p) }})\n    }}",
            name = f.name,
            sym = f.symbol
        );
    }
    s.push_str("}\n\n");

    for f in functions {
        let params: Vec<String> = f.params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
        let args: Vec<&str> = f.params.iter().map(|(n, _)| n.as_str()).collect();
        let fail = if f.ret == "CUresult" {
            "Err(e) => e.to_cuda_result(),".to_string()
        } else {
            return_default_for(&f.ret)
        };
        let _ = writeln!(
            s,
            "/// `{name}` from the process-wide driver (symbol `{sym}`). If the driver or the symbol\n/// cannot be loaded it returns the code of [`LoadError::to_cuda_result`]; [`fns::{name}`]\n/// gives the reason.\n///\n/// # Safety\n/// The C contract of `{name}`: see the CUDA driver API documentation.\n#[inline]\npub unsafe fn {name}({params}) -> {ret} {{\n    match fns::{name}() {{\n        // SAFETY: the caller upholds the C contract of `{name}`.\n        Ok(driver_fn) => unsafe {{ driver_fn({args}) }},\n        {fail}\n    }}\n}}\n",
            name = f.name,
            sym = f.symbol,
            params = params.join(", "),
            ret = f.ret,
            args = args.join(", "),
        );
    }
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

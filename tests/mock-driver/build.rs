//! The mock driver's build script, shared by every flavour (`cuda-mock-driver` and the packages
//! under `flavours/`, which build the same `src/`):
//!
//! - reads the flavour from the package name: `cuda-mock-driver` is CUDA 13.0 with
//!   `cuGetProcAddress`; `cuda-mock-driver-12-2` is CUDA 12.2, `cuda-mock-driver-12-2-noproc`
//!   the same without `cuGetProcAddress`;
//! - sets `--cfg exported="SYMBOL"` for every exported symbol the flavour has: those whose ABI
//!   (`SymbolInfo::since` in cuda-stream-sys's generated `symbols.rs`, read here with `include!`) is no
//!   newer than the flavour, less `cuGetProcAddress` and `cuGetProcAddress_v2` for a `-noproc`
//!   one. `exports.rs` puts `#[cfg_attr(exported = "SYMBOL", unsafe(no_mangle))]` on each driver
//!   function, so a flavour exports exactly its version's symbols;
//! - writes `flavour.rs` (the flavour's name, version, and its exported symbols) for `state.rs`;
//! - links the cdylib with `-z nodelete` on Linux: it runs a worker thread for host functions
//!   and keeps process-wide state, so it must never be unmapped by `dlclose` (a dropped
//!   `cuda_stream_sys::Driver`), exactly as the real libcuda stays loaded.

use std::ffi::CStr;
use std::fmt::Write as _;

/// The fields of `cuda_stream_sys::SymbolInfo`, for `symbols.rs` to fill in.
#[allow(dead_code)]
#[derive(Debug)]
pub struct SymbolInfo {
    name: &'static str,
    symbol: &'static CStr,
    base: &'static CStr,
    since: u32,
    per_thread: bool,
}

include!("../../cuda-sys/src/generated/symbols.rs");

const PROC_ADDRESS: [&str; 2] = ["cuGetProcAddress", "cuGetProcAddress_v2"];

fn main() {
    // This script and `symbols.rs` are compiled into it, so a change to either rebuilds and
    // reruns it; otherwise only the manifest (the flavour's name) matters.
    println!("cargo:rerun-if-changed=Cargo.toml");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }

    let package = std::env::var("CARGO_PKG_NAME").expect("cargo sets CARGO_PKG_NAME");
    let (version, proc_address) = flavour(&package).unwrap_or_else(|| {
        panic!("{package}: not a mock driver flavour (cuda-mock-driver-MAJOR-MINOR[-noproc])")
    });

    let mut symbols: Vec<&str> = SYMBOLS
        .iter()
        .map(|s| s.symbol.to_str().expect("symbols are ASCII"))
        .collect();
    symbols.sort_unstable();
    symbols.dedup();
    let mut check = String::from("cargo:rustc-check-cfg=cfg(exported, values(");
    for (i, s) in symbols.iter().enumerate() {
        let _ = write!(check, "{}\"{s}\"", if i == 0 { "" } else { ", " });
    }
    check.push_str("))");
    println!("{check}");

    let mut exported: Vec<&str> = SYMBOLS
        .iter()
        .filter(|s| s.since <= version)
        .map(|s| s.symbol.to_str().expect("symbols are ASCII"))
        .filter(|s| proc_address || !PROC_ADDRESS.contains(s))
        .collect();
    exported.sort_unstable();
    exported.dedup();
    for s in &exported {
        println!("cargo:rustc-cfg=exported=\"{s}\"");
    }

    let name = format!(
        "CUDA {}.{}{}",
        version / 1000,
        version % 1000 / 10,
        if proc_address {
            ""
        } else {
            ", no cuGetProcAddress"
        }
    );
    let mut out = String::new();
    let _ = writeln!(
        out,
        "/// The flavour this library was built as.\npub(crate) const FLAVOUR: Flavour = Flavour {{ name: {name:?}, version: {version}, proc_address: {proc_address}, package: {package:?} }};"
    );
    let _ = writeln!(
        out,
        "/// Every exported driver symbol of this flavour's version, sorted.\npub(crate) const EXPORTED: &[&str] = &["
    );
    for s in &exported {
        let _ = writeln!(out, "    {s:?},");
    }
    out.push_str("];\n");
    let dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(format!("{dir}/flavour.rs"), out).expect("OUT_DIR is writable");
}

/// `cuda-mock-driver` -> (13000, true); `cuda-mock-driver-12-2-noproc` -> (12020, false).
fn flavour(package: &str) -> Option<(u32, bool)> {
    if package == "cuda-mock-driver" {
        return Some((13000, true));
    }
    let rest = package.strip_prefix("cuda-mock-driver-")?;
    let (rest, proc_address) = match rest.strip_suffix("-noproc") {
        Some(r) => (r, false),
        None => (rest, true),
    };
    let (major, minor) = rest.split_once('-')?;
    let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    Some((1000 * major + 10 * minor, proc_address))
}

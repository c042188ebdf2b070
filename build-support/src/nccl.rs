//! `nccl.rs`: the NCCL bindings, from the pinned `nccl.h` of the NCCL wheel for CUDA 13.
//!
//! `nccl.h` includes the CUDA runtime's headers for `cudaStream_t` and the half-precision
//! types; bindgen reads it with stand-ins for those four headers that declare only
//! `cudaStream_t`, which the output takes from the driver bindings (`CUstream`, the same C
//! type). Every `nccl*` function becomes a function-pointer type and an accessor on `Nccl`,
//! resolved by its exported name (NCCL has one ABI per name).

use std::path::Path;

use crate::Result;
use crate::bindgen_run::styled;
use crate::header::{NCCL_HEADER_SHA256, nccl_banner};
use crate::library::{Library, emit, split};
use crate::sha256::sha256_hex;

const NCCL: Library = Library {
    title: "NCCL",
    prefix: "NCCL",
    loader: "Nccl",
    error: "NcclLoadError",
};

/// The stand-ins for the runtime headers `nccl.h` includes.
const STUBS: [(&str, &str); 4] = [
    (
        "cuda_runtime.h",
        "#include <stddef.h>\n#define CUDART_VERSION 13000\ntypedef struct CUstream_st *cudaStream_t;\n",
    ),
    ("cuda_fp16.h", ""),
    ("cuda_bf16.h", ""),
    ("cuda_fp8.h", ""),
];

pub(crate) fn generate_nccl(include: &Path) -> Result<Vec<(String, String)>> {
    let header = include.join("nccl.h");
    let text =
        std::fs::read_to_string(&header).map_err(|e| format!("{}: {e}", header.display()))?;
    let sum = sha256_hex(text.as_bytes());
    if sum != NCCL_HEADER_SHA256 {
        return Err(format!(
            "{}: sha256 {sum} is not the pinned header's {NCCL_HEADER_SHA256}",
            header.display()
        ));
    }
    let stubs = std::env::temp_dir().join(format!("nccl-stubs-{}", std::process::id()));
    std::fs::create_dir_all(&stubs).map_err(|e| e.to_string())?;
    for (name, body) in STUBS {
        std::fs::write(stubs.join(name), body).map_err(|e| e.to_string())?;
    }
    let bindings = styled(
        bindgen::Builder::default()
            .header(header.to_string_lossy())
            .clang_arg(format!("-I{}", stubs.display()))
            .allowlist_function("nccl.*")
            .allowlist_type("nccl.*")
            .allowlist_var("NCCL_.*")
            .blocklist_type("cudaStream_t|CUstream_st"),
        false,
    )
    .generate()
    .map_err(|e| format!("bindgen (nccl.h): {e}"));
    let _ = std::fs::remove_dir_all(&stubs);
    let file: syn::File = syn::parse_str(&bindings?.to_string())
        .map_err(|e| format!("parsing bindgen output: {e}"))?;
    let (items, functions) = split(file)?;

    let mut s = nccl_banner();
    s.push_str(
        "\nuse super::types::CUstream as cudaStream_t;\nuse crate::nccl::{Nccl, NcclLoadError};\nuse core::ffi::c_void;\n\n",
    );
    emit(&mut s, &NCCL, items, &functions);
    Ok(vec![("nccl.rs".into(), s)])
}

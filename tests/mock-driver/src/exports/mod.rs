//! The top layer: the exported C functions, the driver symbols by family of calls and the
//! `cuda_mock_*` control functions. May import `base`, `model` and `state`; nothing imports it.
//!
//! Every function runs its body under [`std::panic::catch_unwind`], so nothing unwinds into C: a
//! panic becomes `CUDA_ERROR_UNKNOWN` (or the control function's neutral answer).
//!
//! # Adding a driver function (one convention, for every flavour)
//!
//! 1. Name the Rust function after the **exported symbol** of the ABI it implements
//!    (`cuStreamDestroy_v2`, `cuEventElapsedTime`, `cuStreamQuery_ptsz`: the `symbol` of its
//!    `cuda_stream_sys::SymbolInfo`), with the C types of that ABI (`cuda_stream_sys::pfn::<binding>`).
//! 2. Put `#[cfg_attr(exported = "<that symbol>", unsafe(no_mangle))]` on it, never a bare
//!    `#[unsafe(no_mangle)]` (that is for the `cuda_mock_*` control functions only). The build
//!    script sets `exported = "<symbol>"` exactly for the symbols whose ABI version is no newer
//!    than the flavour being built (from cuda-stream-sys's generated table), so the CUDA 12.2 flavour
//!    exports it only if CUDA 12.2 had it; a misspelt symbol is an `unexpected_cfgs` warning.
//! 3. Add it to `driver_function_list` (`base/flavour.rs`), so that `cuGetProcAddress` can hand
//!    it out.
//! 4. Where the driver has older ABIs of the function with the same meaning, implement them too
//!    (one shared body taking the symbol name, as `destroy_stream` does), so that old flavours
//!    have the function at all and new ones have every ABI the real driver exports.
//! 5. Start the body with [`call::api`] (or [`call::entry_point`] for functions that may be
//!    called from a host function), passing the symbol: it counts the call, applies the failure
//!    rules and checks `cuInit`.
//!
//! Each family of driver calls has its own file below; a unit test
//! (`driver_exports_follow_the_convention`) checks 1 to 3 on all of them.

// The driver functions have the exported C names, also where a flavour does not export them.
#![allow(non_snake_case)]

/// `?` for functions that return a `CUresult`.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
mod call;

mod init;

mod devices;

mod contexts;

mod streams;

mod events;

mod memory;

mod peers;

mod pools;

mod managed;

mod kernels;

mod launch_ex;

mod graphs;

mod graph_nodes;

mod user_objects;

mod capture;

mod control;

mod races;

mod proc_address;

#[cfg(test)]
mod tests {
    use super::proc_address;

    /// The convention of the module docs, checked on the text of this file and its submodules'.
    #[test]
    fn driver_exports_follow_the_convention() {
        let files = [
            include_str!("call.rs"),
            include_str!("init.rs"),
            include_str!("devices.rs"),
            include_str!("contexts.rs"),
            include_str!("streams.rs"),
            include_str!("events.rs"),
            include_str!("memory.rs"),
            include_str!("peers.rs"),
            include_str!("pools.rs"),
            include_str!("managed.rs"),
            include_str!("kernels.rs"),
            include_str!("launch_ex.rs"),
            include_str!("graphs.rs"),
            include_str!("graph_nodes.rs"),
            include_str!("user_objects.rs"),
            include_str!("capture.rs"),
            include_str!("control.rs"),
            include_str!("proc_address.rs"),
        ];
        let lines: Vec<&str> = files.iter().flat_map(|f| f.lines()).collect();
        let table: Vec<&str> = proc_address::driver_functions()
            .iter()
            .map(|(n, _)| *n)
            .collect();
        let mut exports = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line
                .strip_prefix("pub unsafe extern \"C\" fn ")
                .or_else(|| line.strip_prefix("pub extern \"C\" fn "))
            else {
                continue;
            };
            let name = &rest[..rest.find('(').expect("a parameter list")];
            let attr = lines[i - 1];
            if name.starts_with("cuda_mock_") {
                assert_eq!(attr, "#[unsafe(no_mangle)]", "{name}");
                continue;
            }
            assert_eq!(
                attr,
                format!("#[cfg_attr(exported = \"{name}\", unsafe(no_mangle))]"),
                "{name}: a driver function is exported only where its flavour has it"
            );
            assert!(
                cuda_stream_sys::SymbolInfo::all()
                    .iter()
                    .any(|s| s.symbol.to_str() == Ok(name)),
                "{name} is not a symbol of the bindings"
            );
            assert!(
                table.contains(&name),
                "{name} is missing from driver_functions"
            );
            exports.push(name);
        }
        assert_eq!(
            exports.len(),
            table.len(),
            "driver_functions lists {table:?}"
        );
        assert!(exports.len() >= 85);
    }
}

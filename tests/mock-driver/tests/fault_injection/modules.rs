//! Fault cases of modules and kernels: loading PTX and images, looking kernels up, their
//! attributes, unloading. (Launches are stream operations: `stream_kinds.rs`.)

use cuda_stream::{JitOptions, Module};

use crate::harness::fixture::{Op, PTX, op, op_frees};
use crate::harness::swallowed::{SWALLOW_DROP, SWALLOW_FREE_DROP};

/// Modules and their kernels.
pub(crate) fn ops() -> Vec<Op> {
    vec![
        op_frees(
            "Module::from_ptx_with + function + attributes + close",
            SWALLOW_DROP,
            |fx| {
                let module = Module::from_ptx_with(&fx.ctx, PTX, JitOptions::new().verbose(true))?;
                let f = module.function("scale")?;
                assert!(f.max_threads_per_block() > 0);
                f.registers()?;
                f.static_shared_memory()?;
                f.local_memory()?;
                f.const_memory()?;
                f.ptx_version()?;
                f.binary_version()?;
                f.max_dynamic_shared_memory()?;
                f.set_max_dynamic_shared_memory(64 * 1024)?;
                module.close()
            },
        ),
        op_frees("Module::from_image + drop", SWALLOW_FREE_DROP, |fx| {
            let image = format!("{PTX}\0");
            // SAFETY: NUL-terminated PTX text.
            let module = unsafe { Module::from_image(&fx.ctx, image.as_bytes()) }?;
            module.function("scale").map(drop)
        }),
        op("Module::function (fixture's module)", SWALLOW_DROP, |fx| {
            fx.module.function("scale").map(drop)
        }),
    ]
}

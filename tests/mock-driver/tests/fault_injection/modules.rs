//! Fault cases of modules and kernels: loading PTX and images, looking kernels up, their
//! attributes, unloading. (Launches are stream operations: `stream_kinds.rs`.)

use cuda_stream::{JitOptions, LaunchConfig, Module};

use crate::harness::fixture::{Op, PTX, op, op_frees};
use crate::harness::flavour;
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
        op_frees(
            "Module::from_ptx + global + copy_from_host + to_vec + close",
            SWALLOW_FREE_DROP,
            |fx| {
                let ptx = PTX.replace(
                    ".visible .entry",
                    ".visible .global .align 4 .b8 table[16];\n.visible .entry",
                );
                let module = Module::from_ptx(&fx.ctx, &ptx)?;
                let table = module.global::<u32>("table")?;
                table.copy_from_host(&fx.owned, &[1, 2, 3, 4])?;
                assert_eq!(table.to_vec(&fx.owned)?, [1, 2, 3, 4]);
                drop(table);
                module.close()
            },
        ),
        op("Module::function (fixture's module)", SWALLOW_DROP, |fx| {
            fx.module.function("scale").map(drop)
        }),
        op_frees(
            "Module::from_ptx + launch attributes' device support + close",
            SWALLOW_DROP,
            |fx| {
                // A fresh module: the device's support is asked once per kernel.
                let module = Module::from_ptx(&fx.ctx, PTX)?;
                let f = module.function("scale")?;
                let config = LaunchConfig::new(2, 32)
                    .cluster(2)
                    .cooperative(true)
                    .programmatic_serialization(true);
                let (x, n) = (fx.bytes.device_ptr(), 16u32);
                // SAFETY: `scale` takes a pointer and a u32; the mock runs no device code.
                let r = unsafe { f.launch(&fx.owned, config, &cuda_stream::kernel_args![x, n]) };
                match r {
                    // No cuLaunchKernelEx, nor the attributes (CUDA 11.4).
                    Err(e) if e.is_unsupported() && !flavour().has_abi("cuLaunchKernelEx") => {}
                    r => r?,
                }
                module.close()
            },
        ),
        op(
            "Function::max_potential_block_size + max_active_blocks_per_multiprocessor + LaunchConfig::for_elements_auto",
            SWALLOW_DROP,
            |fx| {
                let f = fx.module.function("scale")?;
                let size = f.max_potential_block_size(0)?;
                assert!(f.max_active_blocks_per_multiprocessor(size.block, 0)? > 0);
                let c = LaunchConfig::for_elements_auto(f, 4096)?;
                assert_eq!(c.block.x, size.block);
                Ok(())
            },
        ),
    ]
}

//! Modules: loading PTX with the JIT's logs and kernels, a bad module's error with the JIT log,
//! and what the types show of the driver's handles.

use std::error::Error as _;

use cuda_stream::ffi::CUresult;
use cuda_stream::{Context, DeviceBuffer, Error, JitOptions, Module, current_context_raw};

use super::{PTX, assert_clean, isolated, mock};

#[test]
fn a_module_loads_from_ptx_with_its_logs_and_kernels() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let modules = m.live_modules();
        let module = Module::from_ptx_with(&ctx, PTX, JitOptions::new().line_info(true)).unwrap();
        assert_eq!(m.live_modules(), modules + 1);
        assert_eq!(
            current_context_raw().unwrap(),
            std::ptr::null_mut(),
            "unbound again"
        );
        assert!(
            module.info_log().contains("'saxpy'") && module.info_log().contains("'small'"),
            "the info log is kept: {:?}",
            module.info_log()
        );
        assert_eq!(module.context(), &ctx);

        let saxpy = module.function("saxpy").unwrap();
        assert_eq!(
            saxpy,
            module.function("saxpy").unwrap(),
            "one handle per kernel"
        );
        assert_eq!(saxpy.context_raw(), ctx.raw());
        assert_eq!(saxpy.max_threads_per_block(), 1024);
        assert_eq!(saxpy.registers().unwrap(), 16 + 2 * 4);
        assert_eq!(saxpy.ptx_version().unwrap(), 50);
        assert_eq!(saxpy.binary_version().unwrap(), 90);
        assert_eq!(saxpy.static_shared_memory().unwrap(), 0);
        assert_eq!(saxpy.local_memory().unwrap(), 0);
        assert_eq!(saxpy.const_memory().unwrap(), 0);
        assert_eq!(saxpy.max_dynamic_shared_memory().unwrap(), 48 * 1024);
        saxpy.set_max_dynamic_shared_memory(100 * 1024).unwrap();
        assert_eq!(saxpy.max_dynamic_shared_memory().unwrap(), 100 * 1024);
        let err = saxpy.set_max_dynamic_shared_memory(1 << 20).unwrap_err();
        assert_eq!(err.call(), Some("cuFuncSetAttribute"), "{err:?}");
        assert_eq!(
            module.function("small").unwrap().max_threads_per_block(),
            128
        );

        let err = module.function("saxpy_typo").unwrap_err();
        assert!(
            matches!(&err, Error::FunctionNotFound { name } if name == "saxpy_typo"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "the module has no kernel named `saxpy_typo`"
        );
        assert!(matches!(
            module.function("a\0b"),
            Err(Error::InvalidArgument { .. })
        ));

        let syncs = m.calls("cuCtxSynchronize");
        drop(module);
        assert_eq!(m.live_modules(), modules);
        assert_eq!(m.calls("cuModuleUnload"), 1);
        assert_eq!(
            m.calls("cuCtxSynchronize"),
            syncs + 1,
            "the unload waits first"
        );

        // The same through `close`, and through `Context::load_ptx`.
        ctx.load_ptx(PTX).unwrap().close().unwrap();
        assert_eq!(m.live_modules(), modules);
        assert_clean(m);
    });
}

#[test]
fn a_bad_module_is_an_error_with_the_jit_log() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let modules = m.live_modules();
        let err =
            Module::from_ptx(&ctx, ".version 7.0\n.target sm_50\n// no kernels\n").unwrap_err();
        assert_eq!(err.call(), Some("cuModuleLoadDataEx"));
        assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_INVALID_PTX));
        assert_eq!(
            err.to_string(),
            "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX"
        );
        let log = err.source().expect("the JIT log is the source").to_string();
        assert!(log.contains("ptxas") && log.contains(".entry"), "{log}");
        match &err {
            Error::ModuleLoad { log: l, .. } => assert_eq!(l.text(), log),
            other => panic!("{other:?}"),
        }
        assert_eq!(m.live_modules(), modules, "nothing loaded");

        // Refused before the driver sees it.
        let loads = m.calls("cuModuleLoadDataEx");
        let err = Module::from_ptx(&ctx, "a\0b").unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        let truncated_elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0";
        for image in [
            &truncated_elf[..],
            b"",
            b"no NUL byte",
            &0xBA55_ED50u32.to_le_bytes(),
        ] {
            // SAFETY: refused before the driver reads it.
            let err = unsafe { Module::from_image(&ctx, image) }.unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        }
        assert_eq!(m.calls("cuModuleLoadDataEx"), loads);

        // NUL-terminated PTX is an image too.
        let mut image = PTX.as_bytes().to_vec();
        image.push(0);
        // SAFETY: NUL-terminated PTX text.
        let module = unsafe { Module::from_image(&ctx, &image) }.unwrap();
        module.function("nothing").unwrap();
        drop(module);
        assert_eq!(m.live_modules(), modules);
        assert_clean(m);
    });
}

#[test]
fn the_types_show_the_driver_handles() {
    let (_lock, _m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let module = Module::from_ptx(&ctx, PTX).unwrap();
        let f = module.function("saxpy").unwrap();
        assert!(format!("{module:?}").starts_with("Module { raw: 0x"));
        assert!(format!("{f:?}").contains("max_threads_per_block: 1024"));
        let buf = DeviceBuffer::<u8>::alloc(&ctx, 1).unwrap();
        assert!(format!("{buf:?}").contains("len: 1"));
    });
}

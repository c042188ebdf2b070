//! Fault cases of devices and contexts: the driver version, device queries, primary contexts,
//! binding and synchronising a context.

use cuda_stream::ffi;
use cuda_stream::{CacheConfig, Context, Device, Limit, current_context_raw, driver_version};

use crate::harness::fixture::{Op, op};
use crate::harness::swallowed::SWALLOW_DROP;

/// Devices and contexts.
pub(crate) fn ops() -> Vec<Op> {
    vec![
        op("driver_version", SWALLOW_DROP, |_| {
            driver_version().map(drop)
        }),
        op("Device::count", SWALLOW_DROP, |_| Device::count().map(drop)),
        op("Device::new", SWALLOW_DROP, |_| Device::new(1).map(drop)),
        op("Device::name", SWALLOW_DROP, |fx| {
            fx.ctx.device().name().map(drop)
        }),
        op("Device::attribute", SWALLOW_DROP, |fx| {
            let a = ffi::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
            fx.ctx1.device().attribute(a).map(drop)
        }),
        op("Device::total_memory", SWALLOW_DROP, |fx| {
            fx.ctx.device().total_memory().map(drop)
        }),
        op("Device::properties", SWALLOW_DROP, |fx| {
            fx.ctx1.device().properties().map(drop)
        }),
        op("Context::limit", SWALLOW_DROP, |fx| {
            fx.ctx.limit(Limit::StackSize).map(drop)
        }),
        op("Context::set_limit", SWALLOW_DROP, |fx| {
            fx.ctx.set_limit(Limit::StackSize, 1024)
        }),
        op("Context::cache_config", SWALLOW_DROP, |fx| {
            fx.ctx.cache_config().map(drop)
        }),
        op("Context::set_cache_config", SWALLOW_DROP, |fx| {
            fx.ctx.set_cache_config(CacheConfig::PreferNone)
        }),
        op("Context::memory_info", SWALLOW_DROP, |fx| {
            fx.ctx.memory_info().map(drop)
        }),
        op("Device::primary_context", SWALLOW_DROP, |_| {
            Device::new(1)?.primary_context().map(drop)
        }),
        op("Context::primary", SWALLOW_DROP, |_| {
            Context::primary(1).map(drop)
        }),
        // A value that is no context: compared with each active primary context (count, get,
        // state, retain, release), never handed to the driver. (A context this crate holds is
        // found with no driver call: `mock/contexts.rs`.)
        op(
            "Context::retain_if_primary (not a context)",
            SWALLOW_DROP,
            |_| {
                let c = Context::retain_if_primary(0x1234 as ffi::CUcontext)?;
                assert!(c.is_none());
                Ok(())
            },
        ),
        op("current_context_raw", SWALLOW_DROP, |_| {
            assert!(current_context_raw()?.is_null());
            Ok(())
        }),
        op("Context::priority_range (not cached)", SWALLOW_DROP, |_| {
            Context::primary(0)?.priority_range().map(drop)
        }),
        op("Context::synchronize", SWALLOW_DROP, |fx| {
            fx.ctx.synchronize()
        }),
        op("Context::bind", SWALLOW_DROP, |fx| {
            let _bound = fx.ctx.bind()?;
            assert_eq!(current_context_raw()?, fx.ctx.raw());
            Ok(())
        }),
    ]
}

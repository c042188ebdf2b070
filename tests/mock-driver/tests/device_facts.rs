//! Device and context facts in typed form, against the test driver (an H100-like device of
//! 80 GiB): the properties, typed attributes and the compute capability; context limits and the
//! cache preference read back as set, per context, with the caller's current context left as it
//! was; memory information; and the raw forms beside the typed ones.

use std::sync::{Mutex, MutexGuard};

use cuda_mock_driver::MockDriver;
use cuda_stream::ffi::{CUlimit, CUresult};
use cuda_stream::{
    CacheConfig, Context, Device, DeviceAttribute, Error, Limit, current_context_raw,
};

static LOCK: Mutex<()> = Mutex::new(());

fn mock() -> (MutexGuard<'static, ()>, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (guard, m)
}

#[test]
fn properties_read_what_the_device_reports() {
    let (_g, _m) = mock();
    let d = Device::new(0).unwrap();
    let p = d.properties().unwrap();
    assert_eq!(p.name, "Mock CUDA Device 0");
    assert_eq!(p.compute_capability, (9, 0));
    assert_eq!(d.compute_capability().unwrap(), (9, 0));
    assert_eq!(p.total_memory, 80 << 30);
    assert_eq!(d.total_memory().unwrap(), 80 << 30);
    assert_eq!(p.multiprocessors, 132);
    assert_eq!(p.warp_size, 32);
    assert_eq!(p.max_block_dim, [1024, 1024, 64]);
    assert_eq!(p.max_grid_dim, [i32::MAX as u32, 65535, 65535]);
    assert_eq!(p.shared_memory_per_block_optin, 227 << 10);
    assert_eq!(p.l2_cache_size, 50 << 20);
    assert!(p.unified_addressing && p.managed_memory && p.concurrent_managed_access);
    assert!(p.memory_pools && p.cooperative_launch && !p.integrated);
    assert_eq!(p.pci.1, 1, "the PCI bus of device 0");
    // HBM3 at 2.619 GHz over 5120 bits: about 3.35 TB/s.
    assert!((p.memory_bandwidth() / 1e12 - 3.352).abs() < 0.01);
    let text = p.to_string();
    assert!(
        text.starts_with("Mock CUDA Device 0 (compute capability 9.0)"),
        "{text}"
    );
    assert!(text.contains("132 multiprocessors"), "{text}");
    // The typed attribute is the raw one.
    for a in [
        DeviceAttribute::MultiprocessorCount,
        DeviceAttribute::MaxSharedMemoryPerBlock,
        DeviceAttribute::PciBusId,
    ] {
        assert_eq!(d.get_attribute(a).unwrap(), d.attribute(a.raw()).unwrap());
    }
    assert_eq!(Device::new(1).unwrap().properties().unwrap().pci.1, 2);
    assert!(matches!(
        Device::from_raw(7).properties(),
        Err(Error::Driver {
            call: "cuDeviceGetName",
            ..
        })
    ));
}

#[test]
fn limits_and_the_cache_preference_read_back_per_context() {
    let (_g, _m) = mock();
    let (c0, c1) = (Context::primary(0).unwrap(), Context::primary(1).unwrap());
    let before = current_context_raw().unwrap();
    assert_eq!(c0.limit(Limit::StackSize).unwrap(), 1024);
    assert_eq!(c0.limit(Limit::MallocHeapSize).unwrap(), 8 << 20);
    assert_eq!(c0.limit(Limit::PrintfFifoSize).unwrap(), 1 << 20);
    c0.set_limit(Limit::StackSize, 4096).unwrap();
    c0.set_limit(Limit::MallocHeapSize, 64 << 20).unwrap();
    assert_eq!(c0.limit(Limit::StackSize).unwrap(), 4096);
    assert_eq!(c0.limit(Limit::MallocHeapSize).unwrap(), 64 << 20);
    assert_eq!(
        c1.limit(Limit::StackSize).unwrap(),
        1024,
        "another context's own"
    );
    assert_eq!(
        c0.limit_raw(CUlimit::CU_LIMIT_STACK_SIZE).unwrap(),
        4096,
        "the raw form"
    );
    assert_eq!(c0.cache_config().unwrap(), CacheConfig::PreferNone);
    c0.set_cache_config(CacheConfig::PreferShared).unwrap();
    assert_eq!(c0.cache_config().unwrap(), CacheConfig::PreferShared);
    assert_eq!(c1.cache_config().unwrap(), CacheConfig::PreferNone);
    for c in [
        CacheConfig::PreferNone,
        CacheConfig::PreferShared,
        CacheConfig::PreferL1,
        CacheConfig::PreferEqual,
    ] {
        assert_eq!(CacheConfig::from_raw(c.raw()), Some(c));
    }
    // A limit the device does not have: the driver's answer, naming the call.
    let e = c0.limit_raw(CUlimit::CU_LIMIT_SHMEM_SIZE).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Driver {
                call: "cuCtxGetLimit",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.driver_code(),
        Some(CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT)
    );
    assert_eq!(e.to_string(), "cuCtxGetLimit: CUDA_ERROR_UNSUPPORTED_LIMIT");
    assert_eq!(current_context_raw().unwrap(), before, "left as it was");
    // Put back what the other tests expect.
    c0.set_limit(Limit::StackSize, 1024).unwrap();
    c0.set_limit(Limit::MallocHeapSize, 8 << 20).unwrap();
    c0.set_cache_config(CacheConfig::PreferNone).unwrap();
}

#[test]
fn memory_info_is_the_context_devices() {
    let (_g, _m) = mock();
    let c = Context::primary(0).unwrap();
    let info = c.memory_info().unwrap();
    assert_eq!(info.total, 80 << 30);
    assert!(info.free <= info.total);
    assert_eq!(info.total, c.device().total_memory().unwrap());
}

//! [`MockDriver`]'s view of modules, launches, device memory, memory pools and page-locked host
//! memory, and its pause of a driver call: the `cuda_mock_*` control functions of
//! `exports/kernels.rs`, `exports/pools.rs` and `exports/control.rs`, resolved from the loaded
//! library on each call.

use std::ffi::c_int;

use crate::MockDriver;

/// What the last successful `cuLaunchKernel` was asked to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockLaunch {
    /// Blocks in the grid.
    pub grid: [u32; 3],
    /// Threads in a block.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_memory_bytes: u32,
    /// Each parameter's bytes, as the driver read them at the call (sizes from the PTX).
    pub params: Vec<Vec<u8>>,
    /// `cuLaunchKernelEx`'s attributes: each `CUlaunchAttributeID` with up to three values
    /// (cluster dimensions; 1 for cooperative and programmatic serialisation; the priority).
    pub attributes: Vec<[u32; 4]>,
}

impl MockDriver {
    /// The control function `name` of the loaded library.
    pub(crate) fn control<T: Copy>(&self, name: &[u8]) -> T {
        // SAFETY: `name` is one of the mock's exports, declared with type `T` in `exports/`
        // (`kernels.rs`, `pools.rs`, `control.rs`, `races.rs`); the library stays loaded while
        // `self` lives (and is linked `-z nodelete`).
        unsafe {
            *self
                ._lib
                .get::<T>(name)
                .expect("the mock exports its control functions")
        }
    }

    /// Holds the caller of the next call of `name` (a binding name, as for
    /// [`fail`](MockDriver::fail)), by any thread, once it is answered, until
    /// [`resume`](MockDriver::resume): a test decides what happens between two driver calls of
    /// another thread. Panics for a symbol the flavour does not export.
    pub fn pause_after(&self, name: &str) {
        let c = std::ffi::CString::new(name).expect("no NUL in a symbol name");
        let f = self.control::<unsafe extern "C" fn(*const std::ffi::c_char) -> c_int>(
            b"cuda_mock_pause_after\0",
        );
        // SAFETY: a NUL-terminated string that outlives the call.
        assert_eq!(unsafe { f(c.as_ptr()) }, 0, "cuda_mock_pause_after({name})");
    }

    /// Whether a caller is held by [`pause_after`](MockDriver::pause_after).
    pub fn paused(&self) -> bool {
        self.control::<extern "C" fn() -> c_int>(b"cuda_mock_paused\0")() == 1
    }

    /// Lets the caller held by [`pause_after`](MockDriver::pause_after) go on (a reset does too).
    pub fn resume(&self) {
        self.control::<extern "C" fn()>(b"cuda_mock_resume\0")()
    }

    /// Modules loaded now.
    pub fn live_modules(&self) -> u64 {
        self.control::<extern "C" fn() -> u64>(b"cuda_mock_live_modules\0")()
    }

    /// Device allocations alive now.
    pub fn live_allocations(&self) -> u64 {
        self.control::<extern "C" fn() -> u64>(b"cuda_mock_live_allocations\0")()
    }

    /// Kernels that have run since the library was loaded (never reset).
    pub fn kernels_run(&self) -> u64 {
        self.control::<extern "C" fn() -> u64>(b"cuda_mock_kernels_run\0")()
    }

    /// The last successful launch, if any.
    pub fn last_launch(&self) -> Option<MockLaunch> {
        let dims =
            self.control::<unsafe extern "C" fn(*mut u32) -> c_int>(b"cuda_mock_last_launch\0");
        let param = self.control::<unsafe extern "C" fn(u32, *mut u8, usize) -> i64>(
            b"cuda_mock_last_launch_param\0",
        );
        let mut v = [0u32; 8];
        // SAFETY: 8 writable values.
        if unsafe { dims(v.as_mut_ptr()) } != 0 {
            return None;
        }
        let params = (0..v[7])
            .map(|i| {
                let mut buf = vec![0u8; 4096];
                // SAFETY: `buf` is writable for its length.
                let n = unsafe { param(i, buf.as_mut_ptr(), buf.len()) };
                buf.truncate(usize::try_from(n).unwrap_or(0));
                buf
            })
            .collect();
        let attribute = self.control::<unsafe extern "C" fn(u32, *mut u32) -> c_int>(
            b"cuda_mock_last_launch_attribute\0",
        );
        let mut attributes = Vec::new();
        let mut a = [0u32; 4];
        // SAFETY: 4 writable values.
        while unsafe { attribute(attributes.len() as u32, a.as_mut_ptr()) } == 0 {
            attributes.push(a);
        }
        Some(MockLaunch {
            grid: [v[0], v[1], v[2]],
            block: [v[3], v[4], v[5]],
            shared_memory_bytes: v[6],
            params,
            attributes,
        })
    }

    /// `cuda_mock_set_memory_pools`: whether device `device` has memory pools
    /// (`CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`, on by default), kept across resets. Set it
    /// before the code under test first allocates on the device (`cuda-stream` asks once).
    /// Panics for a device out of range.
    pub fn set_memory_pools(&self, device: i32, supported: bool) {
        let set =
            self.control::<extern "C" fn(c_int, c_int) -> c_int>(b"cuda_mock_set_memory_pools\0");
        assert_eq!(set(device, c_int::from(supported)), 0, "device {device}");
    }

    /// Memory pools created (`cuMemPoolCreate`) and not destroyed.
    pub fn live_pools(&self) -> u64 {
        self.control::<extern "C" fn() -> u64>(b"cuda_mock_live_pools\0")()
    }

    /// Page-locked host allocations (`cuMemHostAlloc`) not freed.
    pub fn live_host_allocations(&self) -> u64 {
        self.control::<extern "C" fn() -> u64>(b"cuda_mock_live_host_allocations\0")()
    }

    /// `len` bytes of device memory at `ptr` now (no stream involved), or `None` if the range is
    /// not inside one live allocation.
    pub fn read_memory(&self, ptr: u64, len: usize) -> Option<Vec<u8>> {
        let read = self.control::<unsafe extern "C" fn(u64, *mut u8, usize) -> c_int>(
            b"cuda_mock_read_memory\0",
        );
        let mut out = vec![0u8; len];
        // SAFETY: `out` is writable for `len` bytes.
        (unsafe { read(ptr, out.as_mut_ptr(), len) } == 0).then_some(out)
    }
}

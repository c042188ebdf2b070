//! The mock's device: modules parsed from PTX text, their kernels, host-backed device memory,
//! and the work that stream-ordered memory operations and launches leave on the queue.
//!
//! - **Modules** come from PTX text only (a cubin or fatbin is `CUDA_ERROR_INVALID_IMAGE`), read
//!   by `model/ptx.rs`: each `.entry NAME(...)` is a kernel, with its parameters' sizes and an
//!   optional `.maxntid X, Y, Z`. Text without a `.entry` fails to load with
//!   `CUDA_ERROR_INVALID_PTX` and a `ptxas`-style error log; a successful load writes one info-log
//!   line per kernel.
//! - **Memory** is host memory behind fake device addresses that are never reused (each
//!   allocation is followed by an unmapped gap), so a stale or out-of-bounds pointer is always
//!   recognised and counted as a bad use, whether by a call or, later, by queued work (a "GPU
//!   use after free").
//! - **Work**: memsets, device-to-device copies, the device side of host-to-device copies and
//!   kernel launches are jobs on the stream's queue, run in order by the host-function worker. A
//!   host-to-device copy reads the host memory at the call (like the real driver's staging of
//!   pageable memory); a device-to-host copy waits for the stream and copies before returning
//!   (the real driver's behaviour for pageable memory). A kernel is counted, and the few of
//!   `model/kernels.rs` are computed. Each job knows the memory it reads and writes
//!   ([`DeviceState::accesses`]), which the race detector checks (`model/races.rs`).

use std::collections::{BTreeMap, HashMap};

use super::kernels::{Memory, kernel_accesses, run_kernel};
use super::pools::{HostMemory, Pools};
use super::ptx::Entry;
use super::races::{Acc, Kind, Space};

/// Where fake device addresses start, and the gap after each allocation: in the kernel's half of
/// the x86-64 and AArch64 address space, where no host memory of this process can be. Managed
/// memory is host memory whose address is its device address; with fake addresses in the user
/// half (they once started at 0x7f00_0000_0000, where Linux maps large heap blocks) a device
/// allocation's range could cover a managed block's, and a use of the managed block would find
/// the device allocation instead (a random program on the test driver failed so).
const FIRST_ADDRESS: u64 = 0xffff_a000_0000_0000;
const GAP: u64 = 1 << 20;
/// The most a single allocation may have: the mock's memory is the test process's.
pub(crate) const MAX_ALLOCATION: usize = 1 << 30;
/// The dynamic shared memory a launch may use unless raised, and the most it may be raised to.
pub(crate) const DEFAULT_DYNAMIC_SHARED: i32 = 48 * 1024;
pub(crate) const MAX_DYNAMIC_SHARED: i32 = 227 * 1024;

#[derive(Debug)]
pub(crate) struct ModuleRec {
    pub(crate) ctx: usize,
    pub(crate) entries: Vec<Entry>,
    /// `.target sm_50` as 50 (`CU_FUNC_ATTRIBUTE_PTX_VERSION`).
    pub(crate) ptx_version: i32,
    pub(crate) alive: bool,
    /// Its module-scope `.global` and `.const` variables: name, address, size (allocated, zeroed,
    /// with the module; freed when it is unloaded).
    pub(crate) globals: Vec<(String, u64, usize)>,
}

#[derive(Debug)]
pub(crate) struct FunctionRec {
    pub(crate) module: usize,
    pub(crate) entry: usize,
    pub(crate) max_dynamic_shared: i32,
}

#[derive(Debug)]
pub(crate) struct AllocRec {
    pub(crate) ctx: usize,
    pub(crate) size: usize,
    /// Emptied when freed; the record stays so the address is never reused.
    pub(crate) bytes: Vec<u8>,
    pub(crate) alive: bool,
    /// The pool it came from (`cuMemAllocFromPoolAsync`), if any.
    pub(crate) pool: Option<usize>,
    /// A `cuMemFreeAsync` of it is queued: a second free is a bad destroy.
    pub(crate) freeing: bool,
    /// Reserved by an allocation node of a captured graph: allocated (alive) while a launch runs
    /// between the node and its free node.
    pub(crate) graph: bool,
    /// Managed memory (`cuMemAllocManaged`): its address is that of `bytes` itself, so the host
    /// reads and writes the same bytes as the queued work; kept (never dropped) once freed, so
    /// the address is never reused.
    pub(crate) managed: bool,
}

/// What the last successful `cuLaunchKernel` was asked to run.
#[derive(Debug, Clone, Default)]
pub(crate) struct LaunchRec {
    pub(crate) grid: [u32; 3],
    pub(crate) block: [u32; 3],
    pub(crate) shared: u32,
    /// Each parameter's bytes, read through `kernelParams` at the call.
    pub(crate) params: Vec<Vec<u8>>,
    /// `cuLaunchKernelEx`'s attributes: the id and up to three values each.
    pub(crate) attrs: Vec<[u32; 4]>,
}

/// A queued device operation.
#[derive(Debug, Clone)]
pub(crate) enum DeviceWork {
    /// `count` words of `width` bytes at `dst`, each `value`.
    Memset {
        dst: u64,
        width: usize,
        value: u32,
        count: usize,
    },
    /// `bytes` bytes from `src` to `dst`, both device addresses.
    CopyDtoD { dst: u64, src: u64, bytes: usize },
    /// The staged bytes of a host-to-device copy.
    CopyHtoD { dst: u64, data: Vec<u8> },
    /// A captured host-to-device copy: the host memory at `src` is read when the node runs.
    CopyHtoDAt { dst: u64, src: usize, bytes: usize },
    /// A captured device-to-host copy: the host memory at `dst` is written when the node runs.
    CopyDtoH { dst: usize, src: u64, bytes: usize },
    /// A queued `cuMemFreeAsync`: frees the allocation at `ptr` when it runs.
    Free { ptr: u64 },
    /// A graph's allocation node (`cuMemAllocAsync` in a capture): allocates the reserved range
    /// at `ptr` when it runs; one that is still allocated then is a bad use.
    GraphAlloc { ptr: u64 },
    /// An asynchronous copy between device memory and page-locked host memory
    /// (`cuMemHostAlloc`), made when it runs: a host range no longer allocated then is a bad use.
    Pinned {
        to_host: bool,
        host: usize,
        dev: u64,
        bytes: usize,
    },
    /// A kernel of a module: checked to be loaded still, counted, and, for the kernels of
    /// [`run_kernel`], computed.
    Kernel {
        module: usize,
        name: String,
        /// Threads in the grid (`grid * block`, all dimensions).
        threads: u64,
        params: Vec<Vec<u8>>,
    },
    /// Work another library enqueued (the fake NCCL's collectives): the memory it reads and
    /// writes, for the race detector; it changes nothing.
    External {
        name: &'static str,
        accesses: Vec<Acc>,
    },
}

#[derive(Debug)]
pub(crate) struct DeviceState {
    pub(crate) modules: HashMap<usize, ModuleRec>,
    /// Function handles, one per (module, kernel), made on first lookup.
    pub(crate) functions: HashMap<usize, FunctionRec>,
    pub(crate) function_of: HashMap<(usize, usize), usize>,
    pub(crate) allocs: BTreeMap<u64, AllocRec>,
    next_address: u64,
    pub(crate) live_modules: u64,
    pub(crate) live_allocations: u64,
    pub(crate) kernels_run: u64,
    pub(crate) last_launch: Option<LaunchRec>,
    /// Memory pools (`model/pools.rs`).
    pub(crate) pools: Pools,
    /// Page-locked host memory.
    pub(crate) host: HostMemory,
}

impl DeviceWork {
    /// The kind of node it makes in a graph (what `cuGraphExecUpdate` compares).
    pub(crate) fn label(&self) -> &'static str {
        match self {
            DeviceWork::Memset { .. } => "memset",
            DeviceWork::CopyDtoD { .. }
            | DeviceWork::CopyHtoD { .. }
            | DeviceWork::CopyHtoDAt { .. }
            | DeviceWork::CopyDtoH { .. }
            | DeviceWork::Pinned { .. } => "memcpy",
            DeviceWork::Free { .. } => "free",
            DeviceWork::GraphAlloc { .. } => "mem alloc",
            DeviceWork::Kernel { .. } | DeviceWork::External { .. } => "kernel",
        }
    }
}

impl Default for DeviceState {
    fn default() -> DeviceState {
        DeviceState {
            modules: HashMap::new(),
            functions: HashMap::new(),
            function_of: HashMap::new(),
            allocs: BTreeMap::new(),
            next_address: FIRST_ADDRESS,
            live_modules: 0,
            live_allocations: 0,
            kernels_run: 0,
            last_launch: None,
            pools: Pools::default(),
            host: HostMemory::default(),
        }
    }
}

impl DeviceState {
    /// A fresh address range of `size` bytes, 256-byte aligned, never used before.
    pub(crate) fn allocate(&mut self, ctx: usize, size: usize) -> u64 {
        self.allocate_from(ctx, size, None)
    }

    /// [`allocate`](DeviceState::allocate), from pool `pool` if given (counted as its use).
    pub(crate) fn allocate_from(&mut self, ctx: usize, size: usize, pool: Option<usize>) -> u64 {
        let at = self.next_address;
        self.next_address += (size as u64).div_ceil(256) * 256 + GAP;
        self.allocs.insert(
            at,
            AllocRec {
                ctx,
                size,
                bytes: vec![0xa5; size],
                alive: true,
                pool,
                freeing: false,
                graph: false,
                managed: false,
            },
        );
        self.live_allocations += 1;
        if let Some(p) = pool {
            self.pools.allocated(p, size as u64);
        }
        at
    }

    /// `size` (> 0) bytes of managed memory, filled with 0xa5: host memory whose address is the
    /// device address.
    pub(crate) fn allocate_managed(&mut self, ctx: usize, size: usize) -> u64 {
        let bytes = vec![0xa5u8; size];
        let at = bytes.as_ptr() as u64;
        self.allocs.insert(
            at,
            AllocRec {
                ctx,
                size,
                bytes,
                alive: true,
                pool: None,
                freeing: false,
                graph: false,
                managed: true,
            },
        );
        self.live_allocations += 1;
        at
    }

    /// Whether `[ptr, ptr + len)` lies in one live managed allocation.
    pub(crate) fn is_managed(&self, ptr: u64, len: usize) -> bool {
        self.find(ptr, len)
            .is_some_and(|(base, _)| self.allocs[&base].managed)
    }

    /// A fresh range of `size` bytes for a graph's allocation node, not allocated until a launch
    /// reaches the node (`pool`: where the launch takes it from).
    pub(crate) fn reserve_for_graph(&mut self, ctx: usize, size: usize, pool: usize) -> u64 {
        let at = self.next_address;
        self.next_address += (size as u64).div_ceil(256) * 256 + GAP;
        self.allocs.insert(
            at,
            AllocRec {
                ctx,
                size,
                bytes: Vec::new(),
                alive: false,
                pool: Some(pool),
                freeing: false,
                graph: true,
                managed: false,
            },
        );
        at
    }

    /// Runs a graph's allocation node: the reserved range at `ptr` becomes allocated (from its
    /// pool); false if it is not a graph's range or is allocated already.
    fn graph_alloc(&mut self, ptr: u64) -> bool {
        let Some(a) = self.allocs.get_mut(&ptr).filter(|a| a.graph && !a.alive) else {
            return false;
        };
        a.alive = true;
        a.bytes = vec![0xa5; a.size];
        let (pool, size) = (a.pool, a.size as u64);
        self.live_allocations += 1;
        if let Some(p) = pool {
            self.pools.allocated(p, size);
        }
        true
    }

    /// Frees the live allocation that starts at `ptr` (giving its bytes back to its pool);
    /// false if there is none.
    pub(crate) fn free(&mut self, ptr: u64) -> bool {
        let Some(a) = self.allocs.get_mut(&ptr).filter(|a| a.alive) else {
            return false;
        };
        a.alive = false;
        a.freeing = false;
        if !a.managed {
            a.bytes = Vec::new();
        }
        let (pool, size) = (a.pool, a.size as u64);
        self.live_allocations -= 1;
        if let Some(p) = pool {
            self.pools.freed(p, size);
        }
        true
    }

    /// Frees a module's global variable at `ptr` (not counted as a live allocation).
    pub(crate) fn free_global(&mut self, ptr: u64) {
        self.live_allocations += 1;
        if !self.free(ptr) {
            self.live_allocations -= 1;
        }
    }

    /// The live allocation holding `[ptr, ptr + len)`, as (base, offset).
    pub(crate) fn find(&self, ptr: u64, len: usize) -> Option<(u64, usize)> {
        let (&base, rec) = self.allocs.range(..=ptr).next_back()?;
        let offset = usize::try_from(ptr - base).ok()?;
        (rec.alive && offset.checked_add(len)? <= rec.size).then_some((base, offset))
    }

    /// Whether `[ptr, ptr + len)` lies in a range a graph's allocation node reserved.
    pub(crate) fn in_graph_range(&self, ptr: u64, len: usize) -> bool {
        let Some((&base, rec)) = self.allocs.range(..=ptr).next_back() else {
            return false;
        };
        rec.graph
            && usize::try_from(ptr - base)
                .ok()
                .and_then(|o| o.checked_add(len))
                .is_some_and(|end| end <= rec.size)
    }

    /// The bytes `[ptr, ptr + len)` of one live allocation.
    pub(crate) fn slice_mut(&mut self, ptr: u64, len: usize) -> Option<&mut [u8]> {
        let (base, offset) = self.find(ptr, len)?;
        let rec = self.allocs.get_mut(&base)?;
        rec.bytes.get_mut(offset..offset + len)
    }

    pub(crate) fn module_alive(&self, module: usize) -> bool {
        self.modules.get(&module).is_some_and(|m| m.alive)
    }
}

/// Runs one queued operation (on the worker, with the state locked). Memory that is no longer
/// allocated, or a kernel whose module was unloaded, does nothing and gives `false` (a bad use).
pub(crate) fn run(dev: &mut DeviceState, work: DeviceWork) -> bool {
    match work {
        DeviceWork::Memset {
            dst,
            width,
            value,
            count,
        } => match dev.slice_mut(dst, width * count) {
            Some(out) => {
                let word = value.to_le_bytes();
                for (i, b) in out.iter_mut().enumerate() {
                    *b = word[i % width];
                }
                true
            }
            None => false,
        },
        DeviceWork::CopyDtoD { dst, src, bytes } => {
            let data = dev.slice_mut(src, bytes).map(|s| s.to_vec());
            match (data, dev.slice_mut(dst, bytes)) {
                (Some(data), Some(out)) => {
                    out.copy_from_slice(&data);
                    true
                }
                _ => false,
            }
        }
        DeviceWork::CopyHtoD { dst, data } => match dev.slice_mut(dst, data.len()) {
            Some(out) => {
                out.copy_from_slice(&data);
                true
            }
            None => false,
        },
        DeviceWork::CopyHtoDAt { dst, src, bytes } => match dev.slice_mut(dst, bytes) {
            Some(out) => {
                // SAFETY: the capturing caller promised the host memory stays readable for every
                // launch of the graph (`cuMemcpyHtoDAsync`'s contract in a capture).
                let data = unsafe { std::slice::from_raw_parts(src as *const u8, bytes) };
                out.copy_from_slice(data);
                true
            }
            None => false,
        },
        DeviceWork::CopyDtoH { dst, src, bytes } => match dev.slice_mut(src, bytes) {
            Some(data) => {
                // SAFETY: as above, writable and not accessed by the host meanwhile.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, bytes) };
                true
            }
            None => false,
        },
        DeviceWork::Free { ptr } => dev.free(ptr),
        DeviceWork::GraphAlloc { ptr } => dev.graph_alloc(ptr),
        DeviceWork::Pinned {
            to_host,
            host,
            dev: ptr,
            bytes,
        } => {
            if !dev.host.contains(host, bytes) {
                return false;
            }
            let Some(mem) = dev.slice_mut(ptr, bytes) else {
                return false;
            };
            // SAFETY: the host range lies in a live page-locked allocation (just checked), which
            // the caller of the copy promised not to touch until the copy has completed.
            unsafe {
                if to_host {
                    std::ptr::copy_nonoverlapping(mem.as_ptr(), host as *mut u8, bytes);
                } else {
                    std::ptr::copy_nonoverlapping(host as *const u8, mem.as_mut_ptr(), bytes);
                }
            }
            true
        }
        DeviceWork::Kernel {
            module,
            name,
            threads,
            params,
        } => {
            if dev.module_alive(module) {
                dev.kernels_run += 1;
                run_kernel(dev, &name, threads, &params)
            } else {
                false
            }
        }
        DeviceWork::External { .. } => true,
    }
}

impl Memory for DeviceState {
    fn bytes(&mut self, ptr: u64, len: usize) -> Option<&mut [u8]> {
        self.slice_mut(ptr, len)
    }
}

impl DeviceState {
    /// The memory `work` reads and writes: device ranges, and ranges of page-locked host memory
    /// (pageable host memory is not tracked).
    pub(crate) fn accesses(&self, work: &DeviceWork) -> Vec<Acc> {
        let (r, w) = (Kind::Read, Kind::Write);
        let host =
            |p: usize, n: usize, k: Kind| self.host.contains(p, n).then(|| Acc::host(p, n, k));
        let whole = |ptr: u64, k: Kind| {
            let size = self.allocs.get(&ptr).map_or(0, |a| a.size);
            Acc::device(ptr, size, k)
        };
        match work {
            DeviceWork::Memset {
                dst, width, count, ..
            } => vec![Acc::device(*dst, width * count, w)],
            DeviceWork::CopyDtoD { dst, src, bytes } => {
                vec![Acc::device(*src, *bytes, r), Acc::device(*dst, *bytes, w)]
            }
            DeviceWork::CopyHtoD { dst, data } => vec![Acc::device(*dst, data.len(), w)],
            DeviceWork::CopyHtoDAt { dst, src, bytes } => host(*src, *bytes, r)
                .into_iter()
                .chain([Acc::device(*dst, *bytes, w)])
                .collect(),
            DeviceWork::CopyDtoH { dst, src, bytes } => {
                std::iter::once(Acc::device(*src, *bytes, r))
                    .chain(host(*dst, *bytes, w))
                    .collect()
            }
            DeviceWork::Free { ptr } => vec![whole(*ptr, Kind::Free)],
            DeviceWork::GraphAlloc { ptr } => vec![whole(*ptr, w)],
            DeviceWork::Pinned {
                to_host,
                host: h,
                dev,
                bytes,
            } => {
                let (hk, dk) = if *to_host { (w, r) } else { (r, w) };
                host(*h, *bytes, hk)
                    .into_iter()
                    .chain([Acc::device(*dev, *bytes, dk)])
                    .collect()
            }
            DeviceWork::Kernel {
                name,
                threads,
                params,
                ..
            } => kernel_accesses(name, *threads, params),
            DeviceWork::External { accesses, .. } => accesses.clone(),
        }
    }

    /// The allocation an access lies in (alive, freed, or reserved for a graph), by its start:
    /// where the detector keeps the range's records. `None` for memory the mock never handed out.
    pub(crate) fn base_of(&self, acc: &Acc) -> Option<u64> {
        match acc.space {
            Space::Device => {
                let (&base, rec) = self.allocs.range(..=acc.ptr).next_back()?;
                (acc.ptr < base + rec.size.max(1) as u64).then_some(base)
            }
            Space::Host => self.host.base_of(acc.ptr as usize).map(|b| b as u64),
        }
    }
}

/// Frees what is left in a context whose last reference went: modules and allocations. Returns
/// how many there were (each an orphan).
pub(crate) fn release_ctx(dev: &mut DeviceState, ctx: usize) -> u64 {
    let mut orphans = 0;
    for m in dev.modules.values_mut().filter(|m| m.alive && m.ctx == ctx) {
        m.alive = false;
        dev.live_modules -= 1;
        orphans += 1;
    }
    // A module's globals are freed with it, not counted apart.
    let globals: Vec<u64> = dev
        .modules
        .values()
        .filter(|m| m.ctx == ctx)
        .flat_map(|m| m.globals.iter().map(|g| g.1))
        .collect();
    for p in globals {
        dev.free_global(p);
    }
    let freed: Vec<u64> = dev
        .allocs
        .iter()
        .filter(|(_, a)| a.alive && a.ctx == ctx)
        .map(|(&p, _)| p)
        .collect();
    for p in freed {
        dev.free(p);
        orphans += 1;
    }
    orphans
}

#[cfg(test)]
mod tests {
    #[test]
    fn fake_device_addresses_are_never_host_addresses() {
        // Above the user half of a 48-bit (or 57-bit) address space.
        const { assert!(super::FIRST_ADDRESS >= 1 << 63) };
        let host = vec![0u8; 1 << 20];
        assert!((host.as_ptr() as u64) < super::FIRST_ADDRESS);
    }

    use super::*;

    #[test]
    fn addresses_are_never_reused() {
        let mut d = DeviceState::default();
        let a = d.allocate(1, 100);
        let b = d.allocate(1, 100);
        assert!(b >= a + 256 + GAP);
        assert_eq!(d.find(a + 99, 1), Some((a, 99)));
        assert_eq!(d.find(a + 100, 1), None);
        assert_eq!(d.find(a, 101), None);
        d.allocs.get_mut(&a).unwrap().alive = false;
        assert_eq!(d.find(a, 1), None);
    }
}

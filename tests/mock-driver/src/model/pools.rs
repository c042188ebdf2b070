//! Memory pools (each device's default pool, and those `cuMemPoolCreate` makes) and page-locked
//! host memory (`cuMemHostAlloc`): plain records and their accounting.
//!
//! - A pool counts the bytes of its live allocations (*used*) and what it reserves from the
//!   system (*reserved*): used, plus freed memory it keeps for reuse, up to its release threshold
//!   (0 by default: nothing is kept). `cuMemPoolTrimTo` gives kept memory back down to the bytes
//!   asked. Both have high-water marks, which setting to 0 resets to the current value.
//! - `cuMemPoolDestroy` returns at once: the handle is dead for every later call, and the pool is
//!   released once its last allocation is freed (as the driver does). A default pool is never
//!   destroyed.
//! - Host memory is real memory of the process, 4096-byte aligned, recorded so that a free of
//!   anything else is recognised and so that queued copies can tell whether it is still
//!   allocated when they run.

use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap};

use super::records::new_address;

/// Alignment of host allocations (a page, as the driver gives).
const HOST_ALIGN: usize = 4096;

#[derive(Debug, Default)]
pub(crate) struct PoolRec {
    pub(crate) device: i32,
    /// A device's default pool (never destroyed).
    pub(crate) default: bool,
    /// `cuMemPoolDestroy` was called: the handle is dead.
    pub(crate) destroyed: bool,
    pub(crate) release_threshold: u64,
    pub(crate) used: u64,
    pub(crate) used_high: u64,
    /// Freed bytes kept for reuse (reserved = used + kept).
    pub(crate) kept: u64,
    pub(crate) reserved_high: u64,
    /// Allocations from it still alive.
    pub(crate) live: u64,
    /// Other devices granted access (`cuMemPoolSetAccess`): (device, `CUmemAccess_flags`).
    pub(crate) access: Vec<(i32, u32)>,
}

impl PoolRec {
    /// The access flags of `device`: read-write (3) for the pool's own device.
    pub(crate) fn access_of(&self, device: i32) -> u32 {
        if device == self.device {
            return 3;
        }
        self.access
            .iter()
            .find(|(d, _)| *d == device)
            .map_or(0, |a| a.1)
    }
}

impl PoolRec {
    pub(crate) fn reserved(&self) -> u64 {
        self.used + self.kept
    }

    fn note_highs(&mut self) {
        self.used_high = self.used_high.max(self.used);
        self.reserved_high = self.reserved_high.max(self.reserved());
    }

    /// Gives kept memory back until at most `keep` bytes are reserved (never below used).
    pub(crate) fn trim_to(&mut self, keep: u64) {
        self.kept = self.kept.min(keep.saturating_sub(self.used));
    }

    pub(crate) fn set_release_threshold(&mut self, bytes: u64) {
        self.release_threshold = bytes;
        self.kept = self.kept.min(bytes);
    }

    pub(crate) fn reset_used_high(&mut self) {
        self.used_high = self.used;
    }

    pub(crate) fn reset_reserved_high(&mut self) {
        self.reserved_high = self.reserved();
    }
}

/// The pools of every device, and which devices say they have them.
#[derive(Debug, Default)]
pub(crate) struct Pools {
    pub(crate) pools: HashMap<usize, PoolRec>,
    defaults: HashMap<i32, usize>,
    /// Devices whose `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` is 0.
    pub(crate) unsupported: Vec<i32>,
    /// Pools created and not destroyed (default pools not counted).
    pub(crate) live_pools: u64,
}

impl Pools {
    pub(crate) fn supported(&self, device: i32) -> bool {
        !self.unsupported.contains(&device)
    }

    /// The default pool of `device`: one handle per device, made on first use.
    pub(crate) fn default_pool(&mut self, device: i32) -> usize {
        if let Some(&h) = self.defaults.get(&device) {
            return h;
        }
        let h = new_address();
        self.pools.insert(
            h,
            PoolRec {
                device,
                default: true,
                ..PoolRec::default()
            },
        );
        self.defaults.insert(device, h);
        h
    }

    pub(crate) fn create(&mut self, device: i32) -> usize {
        let h = new_address();
        self.pools.insert(
            h,
            PoolRec {
                device,
                ..PoolRec::default()
            },
        );
        self.live_pools += 1;
        h
    }

    /// A pool that may be used: known and not destroyed.
    /// A live pool (not destroyed).
    pub(crate) fn get(&self, h: usize) -> Option<&PoolRec> {
        self.pools.get(&h).filter(|p| !p.destroyed)
    }

    pub(crate) fn get_mut(&mut self, h: usize) -> Option<&mut PoolRec> {
        self.pools.get_mut(&h).filter(|p| !p.destroyed)
    }

    /// `cuMemPoolDestroy`: false for an unknown, destroyed or default pool.
    pub(crate) fn destroy(&mut self, h: usize) -> bool {
        match self.get_mut(h) {
            Some(p) if !p.default => {
                p.destroyed = true;
                self.live_pools -= 1;
                true
            }
            _ => false,
        }
    }

    /// `size` bytes allocated from pool `h`: reused from kept memory first.
    pub(crate) fn allocated(&mut self, h: usize, size: u64) {
        if let Some(p) = self.pools.get_mut(&h) {
            p.kept = p.kept.saturating_sub(size);
            p.used += size;
            p.live += 1;
            p.note_highs();
        }
    }

    /// `size` bytes of pool `h` freed: kept up to the release threshold.
    pub(crate) fn freed(&mut self, h: usize, size: u64) {
        if let Some(p) = self.pools.get_mut(&h) {
            p.used -= size;
            p.live -= 1;
            p.kept = (p.kept + size).min(p.release_threshold);
            if p.destroyed && p.live == 0 {
                p.kept = 0;
            }
        }
    }
}

/// What a range to register overlaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overlap {
    /// Memory of `cuMemHostAlloc`.
    Allocation,
    /// A registered range.
    Registered,
}

/// Page-locked host memory: start address to size, of `cuMemHostAlloc` allocations and of
/// ranges the caller registered (`cuMemHostRegister`).
#[derive(Debug, Default)]
pub(crate) struct HostMemory {
    allocs: BTreeMap<usize, usize>,
    registered: BTreeMap<usize, usize>,
}

impl HostMemory {
    /// `size` (> 0) bytes filled with 0xa5, or `None` if the process has no memory for them.
    pub(crate) fn allocate(&mut self, size: usize) -> Option<usize> {
        let layout = Layout::from_size_align(size, HOST_ALIGN).ok()?;
        // SAFETY: `size` is not zero (the caller's promise).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` holds `size` writable bytes, just allocated.
        unsafe { std::ptr::write_bytes(p, 0xa5, size) };
        self.allocs.insert(p as usize, size);
        Some(p as usize)
    }

    /// Frees the allocation starting at `p`; false if there is none.
    pub(crate) fn free(&mut self, p: usize) -> bool {
        let Some(size) = self.allocs.remove(&p) else {
            return false;
        };
        let layout = Layout::from_size_align(size, HOST_ALIGN).expect("allocated with it");
        // SAFETY: allocated by `allocate` with this layout, and freed once (just removed).
        unsafe { std::alloc::dealloc(p as *mut u8, layout) };
        true
    }

    /// Whether `[p, p + len)` lies inside one live allocation or registered range.
    pub(crate) fn contains(&self, p: usize, len: usize) -> bool {
        [&self.allocs, &self.registered].into_iter().any(|map| {
            map.range(..=p).next_back().is_some_and(|(&base, &size)| {
                (p - base).checked_add(len).is_some_and(|e| e <= size)
            })
        })
    }

    /// Registers the caller's `[p, p + size)`; what it overlaps otherwise: a page-locked
    /// allocation or a registered range.
    pub(crate) fn register(&mut self, p: usize, size: usize) -> Result<(), Overlap> {
        let end = p.saturating_add(size);
        let overlaps = |map: &BTreeMap<usize, usize>| {
            map.range(..end)
                .next_back()
                .is_some_and(|(&base, &len)| base + len > p)
        };
        if overlaps(&self.allocs) {
            return Err(Overlap::Allocation);
        }
        if overlaps(&self.registered) {
            return Err(Overlap::Registered);
        }
        self.registered.insert(p, size);
        Ok(())
    }

    /// Unregisters the range registered at `p`, giving its size; `None` if none starts there.
    pub(crate) fn unregister(&mut self, p: usize) -> Option<usize> {
        self.registered.remove(&p)
    }

    /// How many ranges are registered now.
    pub(crate) fn registered(&self) -> u64 {
        self.registered.len() as u64
    }

    /// The size of the live allocation that starts at `p`.
    pub(crate) fn size_of(&self, p: usize) -> Option<usize> {
        self.allocs.get(&p).copied()
    }

    /// The start of the live allocation holding `p`.
    pub(crate) fn base_of(&self, p: usize) -> Option<usize> {
        [&self.allocs, &self.registered]
            .into_iter()
            .find_map(|map| {
                let (&base, &size) = map.range(..=p).next_back()?;
                (p - base < size).then_some(base)
            })
    }

    pub(crate) fn live(&self) -> u64 {
        self.allocs.len() as u64
    }
}

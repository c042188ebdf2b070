//! Modules, kernels and launches: `cuModuleLoadDataEx` (PTX text), `cuModuleGetFunction`,
//! `cuModuleGetGlobal_v2`, `cuModuleUnload`, `cuFuncGetAttribute`, `cuFuncSetAttribute`, `cuLaunchKernel`, and the
//! control functions that report on them and on device memory. The model is `model/device.rs`.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use cuda_stream_sys::{
    CUfunction, CUfunction_attribute, CUjit_option, CUmodule, CUresult, CUstream,
};

use super::call::{INVALID_HANDLE, INVALID_VALUE, SUCCESS, api, guard, put, read};
use crate::model::device::{
    DEFAULT_DYNAMIC_SHARED, DeviceWork, FunctionRec, LaunchRec, MAX_DYNAMIC_SHARED, ModuleRec,
};
use crate::model::jobs::Work;
use crate::model::ptx::{parse_globals, parse_ptx};
use crate::state::{self, State};

/// A fresh, never-freed heap address to serve as a module or function handle.
fn fresh_handle() -> usize {
    let cell: &'static mut u64 = Box::leak(Box::new(0));
    cell as *mut u64 as usize
}

/// A JIT log buffer given through the options, and the slot its size came in (written back
/// with the number of bytes filled, as the driver does).
struct LogBuffer {
    buf: *mut u8,
    size_slot: *mut *mut c_void,
    cap: usize,
}

impl LogBuffer {
    /// Writes `text` (truncated, `NUL`-terminated) and reports the length in the size slot.
    ///
    /// # Safety
    ///
    /// `buf` is null or valid for `cap` bytes of writes; `size_slot` is null or valid for a write.
    unsafe fn write(&self, text: &str) {
        if self.buf.is_null() || self.cap == 0 {
            return;
        }
        let n = text.len().min(self.cap - 1);
        // SAFETY: the caller's promise; `n + 1 <= cap`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), self.buf, n);
            put(self.buf.add(n), 0);
            if !self.size_slot.is_null() {
                put(self.size_slot, std::ptr::without_provenance_mut(n));
            }
        }
    }
}

/// `cuModuleLoadDataEx`: PTX text only. Its `.entry` kernels are the module's functions; text
/// without one (or without `.version`) fails with `CUDA_ERROR_INVALID_PTX` and a `ptxas`-style
/// error log; a cubin or fatbin (ELF or fatbin magic) is `CUDA_ERROR_INVALID_IMAGE`. The info and
/// error log options are honoured (the size slots are written back with the bytes filled); other
/// options below `CU_JIT_NUM_OPTIONS` are accepted and ignored.
///
/// # Safety
///
/// `module` is null or valid for a write; `image` is null or a `NUL`-terminated image; the
/// option arrays hold `num_options` entries each, and each log buffer is valid for its size.
#[cfg_attr(exported = "cuModuleLoadDataEx", unsafe(no_mangle))]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut CUmodule,
    image: *const c_void,
    num_options: c_uint,
    options: *mut CUjit_option,
    option_values: *mut *mut c_void,
) -> CUresult {
    api("cuModuleLoadDataEx", false, |mut st| {
        if module.is_null() || image.is_null() {
            return INVALID_VALUE;
        }
        if num_options > 0 && (options.is_null() || option_values.is_null()) {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        let mut info = LogBuffer {
            buf: std::ptr::null_mut(),
            size_slot: std::ptr::null_mut(),
            cap: 0,
        };
        let mut error = LogBuffer {
            buf: std::ptr::null_mut(),
            size_slot: std::ptr::null_mut(),
            cap: 0,
        };
        for i in 0..num_options as usize {
            // SAFETY: both arrays hold `num_options` entries.
            let (key, slot) = unsafe { (*options.add(i), option_values.add(i)) };
            // SAFETY: as above.
            let value = unsafe { *slot };
            match key {
                CUjit_option::CU_JIT_INFO_LOG_BUFFER => info.buf = value.cast(),
                CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES => {
                    info.cap = value as usize;
                    info.size_slot = slot;
                }
                CUjit_option::CU_JIT_ERROR_LOG_BUFFER => error.buf = value.cast(),
                CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES => {
                    error.cap = value as usize;
                    error.size_slot = slot;
                }
                k if k.0 < CUjit_option::CU_JIT_NUM_OPTIONS.0 => {}
                _ => return INVALID_VALUE,
            }
        }
        // SAFETY: the caller passes a NUL-terminated image (a cubin or fatbin has a NUL byte in
        // its first 8 bytes, so this never reads far).
        let bytes = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_bytes();
        if bytes.starts_with(b"\x7fELF") || bytes.starts_with(&0xBA55_ED50u32.to_le_bytes()) {
            // SAFETY: the buffers are the caller's, valid for their sizes.
            unsafe { error.write("cuda-mock-driver loads PTX text only, not cubins or fatbins") };
            return CUresult::CUDA_ERROR_INVALID_IMAGE;
        }
        let text = String::from_utf8_lossy(bytes);
        let (entries, ptx_version) = match parse_ptx(&text) {
            Ok(parsed) => parsed,
            Err(log) => {
                // SAFETY: as above.
                unsafe { error.write(&log) };
                return CUresult::CUDA_ERROR_INVALID_PTX;
            }
        };
        let log: String = entries
            .iter()
            .map(|e| {
                format!(
                    "ptxas info    : Compiling entry function '{}' for 'sm_90' (cuda-mock-driver)\n",
                    e.name
                )
            })
            .collect();
        // SAFETY: as above.
        unsafe {
            info.write(&log);
            error.write("");
        }
        let globals = parse_globals(&text)
            .into_iter()
            .map(|(name, size)| {
                let at = st.device.allocate(ctx, size);
                // Module variables start zeroed (the mock ignores initialisers); they are the
                // module's, not counted as live allocations.
                st.device.live_allocations -= 1;
                if let Some(bytes) = st.device.slice_mut(at, size) {
                    bytes.fill(0);
                }
                (name, at, size)
            })
            .collect();
        let h = fresh_handle();
        st.device.modules.insert(
            h,
            ModuleRec {
                ctx,
                entries,
                ptx_version,
                alive: true,
                globals,
            },
        );
        st.device.live_modules += 1;
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(module, h as CUmodule) };
        SUCCESS
    })
}

/// `cuModuleUnload`: its functions become invalid; queued launches of them count as bad uses
/// when they come to run. Anything but a loaded module is counted as a bad destroy.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuModuleUnload", unsafe(no_mangle))]
pub unsafe extern "C" fn cuModuleUnload(hmod: CUmodule) -> CUresult {
    api("cuModuleUnload", false, |mut st| {
        match st.device.modules.get_mut(&(hmod as usize)) {
            Some(m) if m.alive => {
                m.alive = false;
                let globals: Vec<u64> = m.globals.iter().map(|g| g.1).collect();
                st.device.live_modules -= 1;
                for p in globals {
                    st.device.free_global(p);
                }
                SUCCESS
            }
            _ => {
                st.counters.bad_destroys += 1;
                INVALID_HANDLE
            }
        }
    })
}

/// A live module handle, or a counted bad use.
fn live_module(st: &mut State, hmod: usize) -> Result<(), CUresult> {
    if st.device.module_alive(hmod) {
        Ok(())
    } else {
        st.counters.bad_uses += 1;
        crate::base::trace_bad_use(file!(), line!());
        Err(INVALID_HANDLE)
    }
}

/// `cuModuleGetGlobal_v2`: the address and size of a module-scope `.global` or `.const`
/// variable of the module's PTX (either out-pointer may be null); `CUDA_ERROR_NOT_FOUND` for a
/// name it does not declare.
///
/// # Safety
///
/// Each out-pointer is null or valid for a write; `name` is null or a `NUL`-terminated string.
#[cfg_attr(exported = "cuModuleGetGlobal_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut cuda_stream_sys::CUdeviceptr,
    bytes: *mut usize,
    hmod: CUmodule,
    name: *const c_char,
) -> CUresult {
    api("cuModuleGetGlobal_v2", false, |mut st| {
        if name.is_null() {
            return INVALID_VALUE;
        }
        let hmod = hmod as usize;
        tri!(live_module(&mut st, hmod));
        // SAFETY: the caller passes a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let Some(&(_, at, size)) = st.device.modules[&hmod]
            .globals
            .iter()
            .find(|g| g.0 == name)
        else {
            return CUresult::CUDA_ERROR_NOT_FOUND;
        };
        // SAFETY: each is null or writable (the caller's contract).
        unsafe {
            if !dptr.is_null() {
                put(dptr, at);
            }
            if !bytes.is_null() {
                put(bytes, size);
            }
        }
        SUCCESS
    })
}

/// `cuModuleGetFunction`: `CUDA_ERROR_NOT_FOUND` for a name the PTX has no `.entry` for; the
/// same handle for the same kernel every time.
///
/// # Safety
///
/// `hfunc` is null or valid for a write; `name` is null or a `NUL`-terminated string.
#[cfg_attr(exported = "cuModuleGetFunction", unsafe(no_mangle))]
pub unsafe extern "C" fn cuModuleGetFunction(
    hfunc: *mut CUfunction,
    hmod: CUmodule,
    name: *const c_char,
) -> CUresult {
    api("cuModuleGetFunction", false, |mut st| {
        if hfunc.is_null() || name.is_null() {
            return INVALID_VALUE;
        }
        let hmod = hmod as usize;
        tri!(live_module(&mut st, hmod));
        // SAFETY: the caller passes a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let Some(entry) = st.device.modules[&hmod]
            .entries
            .iter()
            .position(|e| e.name == name)
        else {
            return CUresult::CUDA_ERROR_NOT_FOUND;
        };
        let h = match st.device.function_of.get(&(hmod, entry)) {
            Some(&h) => h,
            None => {
                let h = fresh_handle();
                st.device.function_of.insert((hmod, entry), h);
                st.device.functions.insert(
                    h,
                    FunctionRec {
                        module: hmod,
                        entry,
                        max_dynamic_shared: DEFAULT_DYNAMIC_SHARED,
                    },
                );
                h
            }
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(hfunc, h as CUfunction) };
        SUCCESS
    })
}

/// A function of a loaded module: (module, entry index), or a counted bad use.
pub(super) fn live_function(st: &mut State, f: CUfunction) -> Result<(usize, usize), CUresult> {
    match st.device.functions.get(&(f as usize)) {
        Some(r) if st.device.module_alive(r.module) => Ok((r.module, r.entry)),
        _ => {
            st.counters.bad_uses += 1;
            crate::base::trace_bad_use(file!(), line!());
            Err(INVALID_HANDLE)
        }
    }
}

/// `cuFuncGetAttribute`: an sm_90 kernel of `16 + 2 * parameters` registers, no static shared,
/// local or constant memory, at most 1024 threads a block (or what `.maxntid` says), the PTX's
/// `.version`, 48 KiB of dynamic shared memory unless raised.
///
/// # Safety
///
/// `pi` is null or valid for a write.
#[cfg_attr(exported = "cuFuncGetAttribute", unsafe(no_mangle))]
pub unsafe extern "C" fn cuFuncGetAttribute(
    pi: *mut c_int,
    attrib: CUfunction_attribute,
    hfunc: CUfunction,
) -> CUresult {
    api("cuFuncGetAttribute", false, |mut st| {
        if pi.is_null() {
            return INVALID_VALUE;
        }
        let (module, entry) = tri!(live_function(&mut st, hfunc));
        let m = &st.device.modules[&module];
        let e = &m.entries[entry];
        type A = CUfunction_attribute;
        let v = match attrib {
            A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK => e.max_threads.unwrap_or(1024) as c_int,
            A::CU_FUNC_ATTRIBUTE_NUM_REGS => 16 + 2 * e.params.len() as c_int,
            A::CU_FUNC_ATTRIBUTE_PTX_VERSION => m.ptx_version,
            A::CU_FUNC_ATTRIBUTE_BINARY_VERSION => 90,
            A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                st.device.functions[&(hfunc as usize)].max_dynamic_shared
            }
            A::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT => -1,
            a if a.0 < A::CU_FUNC_ATTRIBUTE_MAX.0 => 0,
            _ => return INVALID_VALUE,
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pi, v) };
        SUCCESS
    })
}

/// `cuFuncSetAttribute`: `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` (0 to 227 KiB) and
/// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT` (-1 to 100); others are read-only.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuFuncSetAttribute", unsafe(no_mangle))]
pub unsafe extern "C" fn cuFuncSetAttribute(
    hfunc: CUfunction,
    attrib: CUfunction_attribute,
    value: c_int,
) -> CUresult {
    api("cuFuncSetAttribute", false, |mut st| {
        tri!(live_function(&mut st, hfunc));
        type A = CUfunction_attribute;
        match attrib {
            A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                if (0..=MAX_DYNAMIC_SHARED).contains(&value) =>
            {
                if let Some(f) = st.device.functions.get_mut(&(hfunc as usize)) {
                    f.max_dynamic_shared = value;
                }
                SUCCESS
            }
            A::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
                if (-1..=100).contains(&value) =>
            {
                SUCCESS
            }
            _ => INVALID_VALUE,
        }
    })
}

/// `cuLaunchKernel`: checks the function (live), the stream (live; a default stream through the
/// current context), that both belong to one context (`CUDA_ERROR_INVALID_HANDLE` otherwise), the
/// dimensions (none zero; grid at most (2^31 - 1, 65535, 65535); block at most (1024, 1024, 64)
/// and the kernel's maximum threads) and the dynamic shared memory; reads each parameter's bytes
/// through `kernelParams` (one per `.param` of the PTX), keeps them for
/// `cuda_mock_last_launch_param`, and queues the kernel on the stream (counted by
/// `cuda_mock_kernels_run` when it runs; the few kernels of `model::device::run_kernel`, such as
/// `saxpy`, are computed on the host, others do nothing), or, on a capturing stream, adds it to
/// the graph as a node run on every launch. `extra` must be null.
///
/// # Safety
///
/// `kernel_params` is null (for a kernel without parameters) or holds one pointer per parameter,
/// each valid for reads of the parameter's size.
#[cfg_attr(exported = "cuLaunchKernel", unsafe(no_mangle))]
pub unsafe extern "C" fn cuLaunchKernel(
    f: CUfunction,
    grid_dim_x: c_uint,
    grid_dim_y: c_uint,
    grid_dim_z: c_uint,
    block_dim_x: c_uint,
    block_dim_y: c_uint,
    block_dim_z: c_uint,
    shared_mem_bytes: c_uint,
    h_stream: CUstream,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    api("cuLaunchKernel", false, |mut st| {
        let launch = Launch {
            call: "cuLaunchKernel",
            f,
            grid: [grid_dim_x, grid_dim_y, grid_dim_z],
            block: [block_dim_x, block_dim_y, block_dim_z],
            shared: shared_mem_bytes,
            stream: h_stream,
            attrs: Vec::new(),
        };
        // SAFETY: the caller's contract.
        unsafe { launch_kernel(&mut st, launch, kernel_params, extra) }
    })
}

/// A launch as `cuLaunchKernel` and `cuLaunchKernelEx` describe it: each attribute as its id
/// and up to three values.
pub(super) struct Launch {
    pub(super) call: &'static str,
    pub(super) f: CUfunction,
    pub(super) grid: [u32; 3],
    pub(super) block: [u32; 3],
    pub(super) shared: u32,
    pub(super) stream: CUstream,
    pub(super) attrs: Vec<[u32; 4]>,
}

/// The body of `cuLaunchKernel` (see there), shared with `cuLaunchKernelEx`.
///
/// # Safety
///
/// As `cuLaunchKernel`.
pub(super) unsafe fn launch_kernel(
    st: &mut State,
    launch: Launch,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let Launch {
        call,
        f,
        grid,
        block,
        shared: shared_mem_bytes,
        stream: h_stream,
        attrs,
    } = launch;
    let (module, entry) = tri!(live_function(st, f));
    let s = tri!(st.stream(h_stream));
    if s.ctx != st.device.modules[&module].ctx {
        return INVALID_HANDLE;
    }
    let threads: u64 = block.iter().map(|&d| u64::from(d)).product();
    let e = &st.device.modules[&module].entries[entry];
    let max_threads = u64::from(e.max_threads.unwrap_or(1024));
    let max_shared = st.device.functions[&(f as usize)].max_dynamic_shared;
    if grid.contains(&0)
        || block.contains(&0)
        || grid[0] > i32::MAX as u32
        || grid[1] > 65535
        || grid[2] > 65535
        || block[0] > 1024
        || block[1] > 1024
        || block[2] > 64
        || threads > max_threads
        || i64::from(shared_mem_bytes) > i64::from(max_shared)
        || !extra.is_null()
    {
        return INVALID_VALUE;
    }
    if !e.params.is_empty() && kernel_params.is_null() {
        return INVALID_VALUE;
    }
    let mut params = Vec::with_capacity(e.params.len());
    for (i, &size) in e.params.iter().enumerate() {
        // SAFETY: the caller passes one pointer per parameter.
        let p = unsafe { *kernel_params.add(i) };
        if p.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: the caller promises each pointer is readable for the parameter's size.
        params.push(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), size) }.to_vec());
    }
    let work = DeviceWork::Kernel {
        module,
        name: e.name.clone(),
        threads: grid.iter().chain(&block).map(|&d| u64::from(d)).product(),
        params: params.clone(),
    };
    if let Some(rc) = crate::state::capture::on_device_work(st, s, &work) {
        if rc != SUCCESS {
            return rc;
        }
    } else {
        st.race_work(s, call, &work);
        tri!(st.enqueue(s, Work::Device(work)));
    }
    st.device.last_launch = Some(LaunchRec {
        grid,
        block,
        shared: shared_mem_bytes,
        params,
        attrs,
    });
    SUCCESS
}

// ---------------------------------------------------------------------------------------------
// Control

/// Modules loaded and not unloaded (by `cuModuleUnload` or with their context).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_modules() -> u64 {
    read(|st| st.device.live_modules)
}

/// Device allocations made and not freed (by `cuMemFree` or with their context).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_allocations() -> u64 {
    read(|st| st.device.live_allocations)
}

/// Kernels that have run (left the queue), since the library was loaded.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_kernels_run() -> u64 {
    read(|st| st.device.kernels_run)
}

/// The last successful launch: writes grid x, y, z, block x, y, z, dynamic shared bytes and the
/// number of parameters to `out[0..8]`. Returns 0, or -1 if there was none.
///
/// # Safety
///
/// `out` is null or valid for 8 writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_last_launch(out: *mut u32) -> c_int {
    guard(-1, || {
        let st = state::lock();
        let (Some(l), false) = (&st.device.last_launch, out.is_null()) else {
            return -1;
        };
        let v = [
            l.grid[0],
            l.grid[1],
            l.grid[2],
            l.block[0],
            l.block[1],
            l.block[2],
            l.shared,
            l.params.len() as u32,
        ];
        // SAFETY: the caller's promise: 8 writable values.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, v.len()) };
        0
    })
}

/// Copies parameter `i` of the last launch (as read at the call) to `out` (at most `cap` bytes).
/// Returns the parameter's size, or -1 if there is no such parameter.
///
/// # Safety
///
/// `out` is null or valid for `cap` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_last_launch_param(i: u32, out: *mut u8, cap: usize) -> i64 {
    guard(-1, || {
        let st = state::lock();
        let Some(p) = st
            .device
            .last_launch
            .as_ref()
            .and_then(|l| l.params.get(i as usize))
        else {
            return -1;
        };
        if !out.is_null() {
            // SAFETY: the caller's promise; at most `cap` bytes.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), out, p.len().min(cap)) };
        }
        p.len() as i64
    })
}

/// Reads `len` bytes of device memory at `ptr` into `out` now, bypassing every stream. Returns
/// 0, or -1 if the range is not inside one live allocation.
///
/// # Safety
///
/// `out` is null or valid for `len` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_read_memory(ptr: u64, out: *mut u8, len: usize) -> c_int {
    guard(-1, || {
        let mut st = state::lock();
        match (st.device.slice_mut(ptr, len), out.is_null()) {
            (Some(bytes), false) => {
                // SAFETY: the caller's promise: `len` writable bytes.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out, len) };
                0
            }
            _ => -1,
        }
    })
}

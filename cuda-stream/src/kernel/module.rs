//! Device code: a [`Module`] loaded into a context from PTX text or a cubin/fatbin image, with
//! the JIT compiler's logs, and the kernels ([`Function`]) it holds.

use std::ffi::{CString, c_void};
use std::fmt;
use std::ptr;
use std::sync::{Arc, Mutex};

use crate::base::error::{Error, JitLog, Result, check, driver_fn};
use crate::base::params::ParamInfo;
use crate::driver::context::{Context, bind, destroy_after_work};
use crate::ffi;
use crate::kernel::kernel_info::{KernelInfo, KernelInfos, driver_params};
use crate::kernel::ptx_params;
use crate::memory::allocation::Allocation;

/// How big each JIT log buffer is: the driver truncates longer logs.
const LOG_BYTES: usize = 16 * 1024;

/// Options for the JIT compiler when a module is loaded from PTX ([`Module::from_ptx_with`]).
/// The default leaves every choice to the driver.
///
/// ```
/// use cuda_stream::JitOptions;
///
/// let options = JitOptions::new().max_registers(64).line_info(true);
/// assert_eq!(options.registers_limit(), Some(64));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct JitOptions {
    max_registers: Option<u32>,
    optimization_level: Option<u32>,
    line_info: bool,
    debug_info: bool,
    verbose: bool,
}

impl JitOptions {
    /// The driver's defaults.
    pub fn new() -> JitOptions {
        JitOptions::default()
    }
    /// At most this many registers per thread (`CU_JIT_MAX_REGISTERS`).
    pub fn max_registers(mut self, registers: u32) -> JitOptions {
        self.max_registers = Some(registers);
        self
    }
    /// The optimisation level of the assembler, 0 to 4 (`CU_JIT_OPTIMIZATION_LEVEL`; the
    /// driver's default is 4).
    pub fn optimization_level(mut self, level: u32) -> JitOptions {
        self.optimization_level = Some(level);
        self
    }
    /// Line numbers for profilers and `compute-sanitizer` (`CU_JIT_GENERATE_LINE_INFO`).
    pub fn line_info(mut self, on: bool) -> JitOptions {
        self.line_info = on;
        self
    }
    /// Full debug information, which disables optimisation (`CU_JIT_GENERATE_DEBUG_INFO`).
    pub fn debug_info(mut self, on: bool) -> JitOptions {
        self.debug_info = on;
        self
    }
    /// A verbose info log, with each kernel's register and memory use (`CU_JIT_LOG_VERBOSE`);
    /// read it with [`Module::info_log`].
    pub fn verbose(mut self, on: bool) -> JitOptions {
        self.verbose = on;
        self
    }
    /// The register limit, if one is set.
    pub fn registers_limit(self) -> Option<u32> {
        self.max_registers
    }
}

/// A module of device code loaded into a context (`cuModuleLoadDataEx`), unloaded on `Drop`
/// (`cuModuleUnload`, with its context bound) after the context's pending work has completed.
///
/// Its kernels are borrowed from it as [`Function`]s, which cannot outlive it.
///
/// ```no_run
/// use cuda_stream::{Context, LaunchConfig, Module, kernel_args};
///
/// const PTX: &str = r#"
/// .version 7.0
/// .target sm_50
/// .address_size 64
/// .visible .entry fill(.param .u64 out, .param .u32 value)
/// {
///     .reg .b32 %r<2>;
///     .reg .b64 %rd<3>;
///     ld.param.u64 %rd1, [out];
///     ld.param.u32 %r1, [value];
///     cvta.to.global.u64 %rd2, %rd1;
///     st.global.u32 [%rd2], %r1;
///     ret;
/// }
/// "#;
///
/// let ctx = Context::primary(0)?;
/// let module = Module::from_ptx(&ctx, PTX)?;
/// let fill = module.function("fill")?;
/// println!("{} registers", fill.registers()?);
/// let stream = ctx.new_stream()?;
/// let out = cuda_stream::DeviceBuffer::<u32>::zeroed(&ctx, &stream, 1)?;
/// // SAFETY: `fill` takes a pointer to one u32 and a u32; `out` holds one u32 and outlives the
/// // work: a raw address is no recorded use, but the `to_vec` below waits for the stream's work
/// // before `out` is dropped (pass `out.write()` instead to have the use recorded).
/// unsafe { fill.launch(&stream, LaunchConfig::new(1, 1), &kernel_args![out.device_ptr(), 7u32]) }?;
/// assert_eq!(out.to_vec(&stream)?, [7]);
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub struct Module {
    raw: ffi::CUmodule,
    ctx: Context,
    /// Its global variables handed out ([`Module::global`]): name, an allocation that holds
    /// `loaded`, size in bytes.
    pub(crate) globals: Mutex<Vec<(String, Arc<Allocation>, usize)>>,
    /// The loaded module, unloaded when the last holder goes: this value, and the graphs that
    /// hold an allocation of `globals`.
    pub(crate) loaded: Arc<Loaded>,
    info_log: String,
    /// The `.entry` parameter lists of the PTX it was loaded from (empty for a cubin).
    ptx_entries: Vec<(String, Vec<ParamInfo>)>,
    /// The kernels handed out, with their parameters.
    kernels: KernelInfos,
}

// SAFETY: a module handle is a driver object that any thread may use; it is unloaded once.
unsafe impl Send for Module {}
// SAFETY: every operation through `&Module` is a thread-safe driver call or reads a `String`.
unsafe impl Sync for Module {}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("raw", &self.raw)
            .field("ctx", &self.ctx.raw())
            .finish()
    }
}

/// The first `NUL`-terminated part of a log buffer, as text.
fn log_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim_end().to_string()
}

/// The first bytes of a fatbin.
const FATBIN_MAGIC: [u8; 4] = 0xBA55_ED50u32.to_le_bytes();

/// Where the magic numbers of the images `cuModuleLoadDataEx` accepts are checked: an ELF cubin
/// must hold its section and program header tables, a fatbin its declared size.
fn check_image(image: &[u8]) -> Result<()> {
    let bad = |reason: &str| {
        Err(Error::InvalidArgument {
            reason: format!("module image: {reason}"),
        })
    };
    let u16_at = |i: usize| {
        image
            .get(i..i + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u64_at = |i: usize| {
        image.get(i..i + 8).map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    };
    if image.is_empty() {
        return bad("empty");
    }
    if image.starts_with(b"\x7fELF") {
        // 64-bit little-endian ELF: the header tables must lie inside the image.
        if image.get(4) != Some(&2) || image.get(5) != Some(&1) {
            return bad("not a 64-bit little-endian ELF file");
        }
        let (Some(phoff), Some(shoff), Some(phentsize), Some(phnum), Some(shentsize), Some(shnum)) = (
            u64_at(0x20),
            u64_at(0x28),
            u16_at(0x36),
            u16_at(0x38),
            u16_at(0x3a),
            u16_at(0x3c),
        ) else {
            return bad("truncated ELF header");
        };
        let len = image.len() as u128;
        let within =
            |off: u64, size: u16, n: u16| u128::from(off) + u128::from(size) * u128::from(n) <= len;
        if !within(phoff, phentsize, phnum) || !within(shoff, shentsize, shnum) {
            return bad("ELF header tables lie past the end of the image (truncated?)");
        }
        return Ok(());
    }
    if image.starts_with(&FATBIN_MAGIC) {
        let (Some(header), Some(size)) = (u16_at(6), u64_at(8)) else {
            return bad("truncated fatbin header");
        };
        if u128::from(header) + u128::from(size) > image.len() as u128 {
            return bad("the fatbin is longer than the image (truncated?)");
        }
        return Ok(());
    }
    // Anything else is PTX text, which must end within the slice.
    if !image.contains(&0) {
        return bad("neither a cubin nor a fatbin, and not NUL-terminated PTX text");
    }
    Ok(())
}

impl Module {
    /// JIT-compiles PTX text for `ctx`'s device and loads it (`cuModuleLoadDataEx`). A failure is
    /// [`Error::ModuleLoad`], whose `source()` is the compiler's error log.
    pub fn from_ptx(ctx: &Context, ptx: &str) -> Result<Module> {
        Module::from_ptx_with(ctx, ptx, JitOptions::new())
    }

    /// [`Module::from_ptx`] with options for the JIT compiler.
    ///
    /// Text that starts with an ELF header (`"\x7fELF"`, valid UTF-8) is refused with
    /// [`Error::InvalidArgument`]: the driver would read it as a cubin, as far as its headers
    /// say, past the end of the text. (A fatbin's magic numbers are not UTF-8.)
    pub fn from_ptx_with(ctx: &Context, ptx: &str, options: JitOptions) -> Result<Module> {
        if ptx.as_bytes().starts_with(b"\x7fELF") {
            return Err(Error::InvalidArgument {
                reason: "PTX text starts with an ELF header: load a cubin with Module::from_image"
                    .to_string(),
            });
        }
        let text = CString::new(ptx).map_err(|e| Error::InvalidArgument {
            reason: format!("PTX text has a NUL byte at {}", e.nul_position()),
        })?;
        // SAFETY: a NUL-terminated string that is no ELF file is read by the driver as PTX
        // text, up to its NUL (fatbin magic numbers cannot start a `str`).
        unsafe { Module::load(ctx, text.as_ptr().cast(), options, Some(ptx)) }
    }

    /// Loads a compiled image: a cubin or fatbin (as `nvcc`, `ptxas`, `nvJitLink` or NVRTC
    /// write them), or `NUL`-terminated PTX text (`cuModuleLoadDataEx`). Obvious truncation is
    /// refused with [`Error::InvalidArgument`] before the driver sees the image.
    ///
    /// # Safety
    ///
    /// `image` must be a well-formed cubin or fatbin, or PTX text ending in a `NUL` byte. The
    /// driver takes no length: it reads as far as the image's own headers say, so a corrupt
    /// binary can make it read past the end of the slice. The checks here (ELF header tables and
    /// a fatbin's declared size inside the slice) catch truncation, not every corruption.
    pub unsafe fn from_image(ctx: &Context, image: &[u8]) -> Result<Module> {
        check_image(image)?;
        // Cubins and fatbins are made of 8-byte fields: hand the driver an 8-byte-aligned copy,
        // whatever the alignment of the slice.
        let mut aligned = vec![0u64; image.len().div_ceil(8)];
        // SAFETY: `aligned` has at least `image.len()` bytes; the two do not overlap.
        unsafe {
            ptr::copy_nonoverlapping(image.as_ptr(), aligned.as_mut_ptr().cast(), image.len())
        };
        // PTX text (neither ELF nor fatbin) has its parameter lists read, as for `from_ptx`.
        let ptx = match image.split(|&b| b == 0).next() {
            Some(t) if !image.starts_with(b"\x7fELF") && !image.starts_with(&FATBIN_MAGIC) => {
                std::str::from_utf8(t).ok()
            }
            _ => None,
        };
        // SAFETY: the caller promises a well-formed image; the copy holds all of its bytes.
        unsafe { Module::load(ctx, aligned.as_ptr().cast(), JitOptions::new(), ptx) }
    }

    /// # Safety
    /// `image` is a complete image the driver can read to its end; `ptx` is its text, if it is
    /// PTX.
    unsafe fn load(
        ctx: &Context,
        image: *const c_void,
        options: JitOptions,
        ptx: Option<&str>,
    ) -> Result<Module> {
        crate::driver::deferred_destroy::drain_if_pending();
        let f = driver_fn!(cuModuleLoadDataEx);
        let mut info = vec![0u8; LOG_BYTES];
        let mut error = vec![0u8; LOG_BYTES];
        use ffi::CUjit_option as O;
        // Option values are passed in pointer-sized slots: sizes and flags as integers.
        let word = |v: usize| ptr::without_provenance_mut::<c_void>(v);
        let mut keys = vec![
            O::CU_JIT_INFO_LOG_BUFFER,
            O::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            O::CU_JIT_ERROR_LOG_BUFFER,
            O::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut values = vec![
            info.as_mut_ptr().cast::<c_void>(),
            word(info.len()),
            error.as_mut_ptr().cast::<c_void>(),
            word(error.len()),
        ];
        if let Some(r) = options.max_registers {
            keys.push(O::CU_JIT_MAX_REGISTERS);
            values.push(word(r as usize));
        }
        if let Some(l) = options.optimization_level {
            keys.push(O::CU_JIT_OPTIMIZATION_LEVEL);
            values.push(word(l as usize));
        }
        for (on, key) in [
            (options.line_info, O::CU_JIT_GENERATE_LINE_INFO),
            (options.debug_info, O::CU_JIT_GENERATE_DEBUG_INFO),
            (options.verbose, O::CU_JIT_LOG_VERBOSE),
        ] {
            if on {
                keys.push(key);
                values.push(word(1));
            }
        }
        let _bound = bind(ctx.raw())?;
        let mut raw = ptr::null_mut();
        // SAFETY: the caller vouches for the image; `keys` and `values` have the same length,
        // each value is what its key expects (a buffer valid for its size, or an integer), and
        // the buffers outlive the call. The context is current.
        let rc = unsafe {
            f(
                &mut raw,
                image,
                keys.len() as u32,
                keys.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if rc != ffi::CUresult::CUDA_SUCCESS {
            return Err(Error::ModuleLoad {
                call: "cuModuleLoadDataEx",
                code: crate::base::error::DriverCode(rc),
                log: JitLog(log_text(&error)),
            });
        }
        if raw.is_null() {
            return Err(Error::NullHandle { what: "module" });
        }
        Ok(Module {
            raw,
            ctx: ctx.clone(),
            globals: Mutex::new(Vec::new()),
            loaded: Arc::new(Loaded {
                raw,
                ctx: ctx.clone(),
                unloaded: false,
            }),
            info_log: log_text(&info),
            ptx_entries: ptx.map(ptx_params::entries).unwrap_or_default(),
            kernels: KernelInfos::default(),
        })
    }

    /// The kernel `name` (`cuModuleGetFunction`), borrowed from the module. A name the module
    /// does not define is [`Error::FunctionNotFound`]. (C++ kernels go by their mangled names
    /// unless declared `extern "C"`.)
    ///
    /// The first time a name is asked for, its parameters are read, for launches to check their
    /// arguments against: from the driver (`cuFuncGetParamInfo`, CUDA 12.4: their sizes), with
    /// their kinds (integer, float, pointer) from the PTX text where the module was loaded from
    /// PTX; on older drivers from the PTX text alone. The PTX is read as the PTX ISA writes it,
    /// and where it cannot be read for sure (a form it does not know, text that needs the C
    /// preprocessor) the parameters are unknown, never guessed. So on a driver before 12.4 a
    /// kernel of a cubin or fatbin, or of such PTX, has no known parameters
    /// ([`Function::params`] is `None`): [`Function::launch`] does not check its arguments and
    /// [`Function::typed`] refuses it.
    pub fn function(&self, name: &str) -> Result<Function<'_>> {
        let c_name = CString::new(name).map_err(|_| Error::InvalidArgument {
            reason: format!("kernel name {name:?} has a NUL byte"),
        })?;
        let f = driver_fn!(cuModuleGetFunction);
        let _bound = bind(self.ctx.raw())?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the module is loaded; the name is NUL-terminated.
        let rc = unsafe { f(&mut raw, self.raw, c_name.as_ptr()) };
        match rc {
            ffi::CUresult::CUDA_SUCCESS => {}
            ffi::CUresult::CUDA_ERROR_NOT_FOUND => {
                return Err(Error::FunctionNotFound {
                    name: name.to_string(),
                });
            }
            rc => return Err(Error::driver("cuModuleGetFunction", rc)),
        }
        if raw.is_null() {
            return Err(Error::NullHandle { what: "function" });
        }
        let info = self.kernels.get_or_try_insert(name, || {
            let ptx = self
                .ptx_entries
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, p)| p.as_slice());
            let params = match driver_params(raw, ptx)? {
                Some(p) => Some(p),
                None => ptx.map(<[ParamInfo]>::to_vec),
            };
            Ok(KernelInfo::new(name, params, self.ctx.device()))
        })?;
        let mut function = Function {
            raw,
            ctx: self.ctx.raw(),
            max_threads: 0,
            info,
        };
        // Asked once, so that every launch checks its block size for free.
        let max = function
            .attribute(ffi::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
        function.max_threads = u32::try_from(max).unwrap_or(0);
        Ok(function)
    }

    /// What the JIT compiler wrote to its info log while loading (empty for most cubins; with
    /// [`JitOptions::verbose`], each kernel's register and memory use).
    pub fn info_log(&self) -> &str {
        &self.info_log
    }

    /// The context the module is loaded in.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The raw handle.
    pub fn raw(&self) -> ffi::CUmodule {
        self.raw
    }

    /// Unloads the module, returning the driver's error: waits for the context's work first
    /// (`cuCtxSynchronize`), so no kernel of the module is still running, then `cuModuleUnload`.
    /// If the wait fails, the module is left loaded (a launch might still be running).
    ///
    /// A graph that holds one of its [global variables](Module::global) (work on it was
    /// captured) keeps the module loaded: then this unloads nothing and answers `Ok`, and the
    /// last such graph's end unloads it (as a drop, after the context's work).
    ///
    /// Inside a host function no CUDA call is made: the wait and the unload are queued for an
    /// ordinary thread, as for a drop, and the answer is [`Error::InHostFunction`](crate::Error::InHostFunction).
    pub fn close(self) -> Result<()> {
        let Module {
            globals, loaded, ..
        } = self;
        // Each global's end waits for its uses (a graph may hold some still); the first error
        // is the answer, after the unload.
        let mut waited = Ok(());
        let globals = globals.into_inner().unwrap_or_else(|e| e.into_inner());
        for (_, alloc, _) in globals {
            if let Some(alloc) = Arc::into_inner(alloc) {
                let r = alloc.free();
                waited = waited.and(r);
            }
        }
        let unloaded = match Arc::into_inner(loaded) {
            Some(mut loaded) => {
                loaded.unloaded = true;
                unload(loaded.raw, &loaded.ctx)
            }
            None => Ok(()),
        };
        waited.and(unloaded)
    }
}

/// A loaded module's handle, shared by its [`Module`] and the allocations of its global
/// variables (which graphs can hold): unloaded by the last holder's drop, after its context's
/// work.
pub(crate) struct Loaded {
    raw: ffi::CUmodule,
    ctx: Context,
    /// Unloaded already (by [`Module::close`]).
    unloaded: bool,
}

// SAFETY: a module handle is a driver object that any thread may use; it is unloaded once.
unsafe impl Send for Loaded {}
// SAFETY: nothing is done through `&Loaded`.
unsafe impl Sync for Loaded {}

/// Unloads `raw` after the work of `ctx` (queued inside a host function).
fn unload(raw: ffi::CUmodule, ctx: &Context) -> Result<()> {
    destroy_after_work(ctx, raw as usize, "cuModuleUnload", unload_now)
}

/// `cuModuleUnload`, in the form [`destroy_after_work`] takes; the context is current and idle.
fn unload_now(raw: usize) -> Result<()> {
    let f = driver_fn!(cuModuleUnload);
    // SAFETY: the caller owns the module and never uses it again; no work of it is pending.
    check(unsafe { f(raw as ffi::CUmodule) }, "cuModuleUnload")
}

impl Drop for Loaded {
    /// Unloads the module after its context's work; inside a host function, later, on an
    /// ordinary thread.
    fn drop(&mut self) {
        if !self.unloaded {
            let _ = unload(self.raw, &self.ctx);
        }
    }
}

/// A kernel of a [`Module`], borrowed from it: `Copy`, `Send + Sync`, valid as long as the
/// module. Launch it with [`Function::launch`], or declare its arguments with
/// [`Function::typed`].
#[derive(Clone, Copy)]
pub struct Function<'m> {
    raw: ffi::CUfunction,
    ctx: ffi::CUcontext,
    max_threads: u32,
    /// The module's record of the kernel (its name and parameters).
    info: &'m KernelInfo,
}

// SAFETY: a function handle is a driver object that any thread may use; it is never destroyed
// on its own (the module owns it).
unsafe impl Send for Function<'_> {}
// SAFETY: as above; no interior mutability on the host.
unsafe impl Sync for Function<'_> {}

impl fmt::Debug for Function<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Function")
            .field("raw", &self.raw)
            .field("ctx", &self.ctx)
            .field("name", &self.info.name)
            .field("max_threads_per_block", &self.max_threads)
            .finish()
    }
}

impl PartialEq for Function<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}
impl Eq for Function<'_> {}

impl<'m> Function<'m> {
    /// The raw handle.
    pub fn raw(self) -> ffi::CUfunction {
        self.raw
    }

    /// The module's record of the kernel.
    pub(crate) fn info(self) -> &'m KernelInfo {
        self.info
    }

    /// The kernel's name, as it was looked up.
    pub fn name(self) -> &'m str {
        &self.info.name
    }

    /// The kernel's parameters, as launches check their arguments against them (see
    /// [`Module::function`]): `None` where they are unknown (on a driver before CUDA 12.4, a
    /// cubin's kernel, or one of PTX this crate cannot read for sure). Then launches are not
    /// checked, and [`Function::typed`] refuses the kernel ([`Error::UnknownParameters`]).
    pub fn params(self) -> Option<&'m [ParamInfo]> {
        self.info.params.as_deref()
    }

    /// The raw handle of the module's context: launches go on streams of this context only.
    pub fn context_raw(self) -> ffi::CUcontext {
        self.ctx
    }

    /// The most threads a block of this kernel may have (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`,
    /// asked when the function was looked up): the device's limit, or less for a kernel that uses
    /// many registers or was compiled with `.maxntid`.
    pub fn max_threads_per_block(self) -> u32 {
        self.max_threads
    }

    /// Any attribute (`cuFuncGetAttribute`).
    pub fn attribute(self, attribute: ffi::CUfunction_attribute) -> Result<i32> {
        let f = driver_fn!(cuFuncGetAttribute);
        let _bound = bind(self.ctx)?;
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer; the function's module is loaded for 'm.
        let rc = unsafe { f(&mut v, attribute, self.raw) };
        check(rc, "cuFuncGetAttribute")?;
        Ok(v)
    }

    fn unsigned(self, attribute: ffi::CUfunction_attribute) -> Result<u32> {
        self.attribute(attribute)
            .map(|v| u32::try_from(v).unwrap_or(0))
    }

    /// Registers per thread (`CU_FUNC_ATTRIBUTE_NUM_REGS`).
    pub fn registers(self) -> Result<u32> {
        self.unsigned(ffi::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)
    }

    /// Statically allocated shared memory per block, in bytes
    /// (`CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`).
    pub fn static_shared_memory(self) -> Result<u32> {
        self.unsigned(ffi::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
    }

    /// Local memory per thread, in bytes (`CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`).
    pub fn local_memory(self) -> Result<u32> {
        self.unsigned(ffi::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)
    }

    /// Constant memory, in bytes (`CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES`).
    pub fn const_memory(self) -> Result<u32> {
        self.unsigned(ffi::CUfunction_attribute::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)
    }

    /// The most dynamic shared memory a launch may ask for, in bytes
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`); raise it with
    /// [`Function::set_max_dynamic_shared_memory`].
    pub fn max_dynamic_shared_memory(self) -> Result<u32> {
        self.unsigned(ffi::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
    }

    /// The PTX version of the kernel, as `10 * major + minor`, as the driver reports it
    /// (`CU_FUNC_ATTRIBUTE_PTX_VERSION`: the virtual architecture it was compiled for, such as
    /// `50` for `.target sm_50`).
    pub fn ptx_version(self) -> Result<u32> {
        self.unsigned(ffi::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PTX_VERSION)
    }

    /// The binary architecture it runs as, as `10 * major + minor` (`90` for `sm_90`;
    /// `CU_FUNC_ATTRIBUTE_BINARY_VERSION`).
    pub fn binary_version(self) -> Result<u32> {
        self.unsigned(ffi::CUfunction_attribute::CU_FUNC_ATTRIBUTE_BINARY_VERSION)
    }

    /// Lets launches ask for up to `bytes` of dynamic shared memory, beyond the default 48 KiB
    /// (`cuFuncSetAttribute` with `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`). The setting
    /// belongs to the kernel, so it applies to every user of the module.
    pub fn set_max_dynamic_shared_memory(self, bytes: u32) -> Result<()> {
        let value = i32::try_from(bytes).map_err(|_| Error::InvalidArgument {
            reason: format!("{bytes} bytes of dynamic shared memory"),
        })?;
        let f = driver_fn!(cuFuncSetAttribute);
        let _bound = bind(self.ctx)?;
        let a = ffi::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        // SAFETY: the function's module is loaded for 'm; the attribute takes an int.
        check(unsafe { f(self.raw, a, value) }, "cuFuncSetAttribute")
    }
}

impl Context {
    /// Loads PTX text into this context; see [`Module::from_ptx`].
    pub fn load_ptx(&self, ptx: &str) -> Result<Module> {
        Module::from_ptx(self, ptx)
    }
}

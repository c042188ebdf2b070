//! The test kernels: a tiny PTX module JIT-compiled by the driver (no toolkit needed) with a
//! `%globaltimer` spin, a delayed store, a copy and an atomic add, each launched `<<<1, 1>>>`.

use std::ffi::{CStr, c_void};
use std::marker::PhantomData;
use std::ptr;
use std::time::Duration;

use cuda_stream::{Device, Enqueue};
use cuda_stream_sys::{self as sys, CUcontext, CUdeviceptr, CUfunction, CUmodule, CUresult};

use crate::context::{HasContext, bind, bind_raw};
use crate::gpu::check;

const PTX_BODY: &str = r#"
.visible .entry spin(
	.param .u64 spin_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [spin_param_0];
	mov.u64 	%rd2, %globaltimer;
$L_spin_loop:
	mov.u64 	%rd3, %globaltimer;
	sub.u64 	%rd4, %rd3, %rd2;
	setp.lt.u64 	%p1, %rd4, %rd1;
	@%p1 bra 	$L_spin_loop;
	ret;
}

.visible .entry store_after_spin(
	.param .u64 store_after_spin_param_0,
	.param .u32 store_after_spin_param_1,
	.param .u64 store_after_spin_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<7>;

	ld.param.u64 	%rd1, [store_after_spin_param_0];
	ld.param.u32 	%r1, [store_after_spin_param_1];
	ld.param.u64 	%rd2, [store_after_spin_param_2];
	cvta.to.global.u64 	%rd3, %rd1;
	mov.u64 	%rd4, %globaltimer;
$L_store_loop:
	mov.u64 	%rd5, %globaltimer;
	sub.u64 	%rd6, %rd5, %rd4;
	setp.lt.u64 	%p1, %rd6, %rd2;
	@%p1 bra 	$L_store_loop;
	st.global.u32 	[%rd3], %r1;
	ret;
}

.visible .entry copy_u32(
	.param .u64 copy_u32_param_0,
	.param .u64 copy_u32_param_1
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [copy_u32_param_0];
	ld.param.u64 	%rd2, [copy_u32_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	ld.global.u32 	%r1, [%rd4];
	st.global.u32 	[%rd3], %r1;
	ret;
}

.visible .entry add_u32(
	.param .u64 add_u32_param_0,
	.param .u32 add_u32_param_1
)
{
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<3>;

	ld.param.u64 	%rd1, [add_u32_param_0];
	ld.param.u32 	%r1, [add_u32_param_1];
	cvta.to.global.u64 	%rd2, %rd1;
	atom.global.add.u32 	%r2, [%rd2], %r1;
	ret;
}
"#;

/// The PTX headers tried in order: `sm_50` first (any driver JIT-compiles it for newer GPUs);
/// `sm_75` in case a driver refuses targets older than it supports offline; then the device's
/// own architecture.
fn ptx_headers(device: Device) -> Vec<String> {
    let mut v = vec![
        ".version 7.0\n.target sm_50\n.address_size 64\n".to_string(),
        ".version 7.0\n.target sm_75\n.address_size 64\n".to_string(),
    ];
    let major =
        device.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    let minor =
        device.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    if let (Ok(major), Ok(minor)) = (major, minor) {
        v.push(format!(
            ".version 8.7\n.target sm_{major}{minor}\n.address_size 64\n"
        ));
    }
    v
}

/// The kernels' PTX with the first header (for reading; [`Kernels::load`] may fall back).
pub fn ptx_source() -> String {
    format!(".version 7.0\n.target sm_50\n.address_size 64\n{PTX_BODY}")
}

/// Loads PTX text with `cuModuleLoadDataEx` (= `cuModuleLoadData` plus the JIT error log).
/// The context must be current.
fn load_module(ptx: &str) -> Result<CUmodule, String> {
    let image = std::ffi::CString::new(ptx).expect("PTX without NUL bytes");
    let mut log = vec![0u8; 16 * 1024];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values = [
        log.as_mut_ptr().cast::<c_void>(),
        ptr::without_provenance_mut::<c_void>(log.len()),
    ];
    let mut module = ptr::null_mut();
    // SAFETY: `image` is a NUL-terminated PTX string; the option arrays have 2 entries each; the
    // log buffer is writable for the size passed and outlives the call.
    let rc = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            image.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if rc == CUresult::CUDA_SUCCESS {
        return Ok(module);
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    Err(format!(
        "{}: {}",
        sys::result_name(rc),
        String::from_utf8_lossy(&log[..end]).trim()
    ))
}

/// The test kernels, loaded in one context, unloaded (with that context bound) on drop.
#[derive(Debug)]
pub struct Kernels<'a> {
    ctx: CUcontext,
    module: CUmodule,
    spin: CUfunction,
    store_after_spin: CUfunction,
    copy_u32: CUfunction,
    add_u32: CUfunction,
    _ctx: PhantomData<&'a ()>,
}

// SAFETY: module and function handles are driver objects usable from any thread; the module is
// unloaded once, on drop, and launches are thread-safe driver calls.
unsafe impl Send for Kernels<'_> {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for Kernels<'_> {}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("duration fits in u64 nanoseconds")
}

impl<'a> Kernels<'a> {
    /// JIT-compiles the PTX module in `ctx` and looks up its kernels.
    #[track_caller]
    pub fn load<C: HasContext + ?Sized>(ctx: &'a C) -> Kernels<'a> {
        let _bound = bind(ctx);
        let ctx = ctx.raw_context();
        let mut dev = 0;
        // SAFETY: `dev` is a valid out-pointer; the context is current.
        check(unsafe { sys::cuCtxGetDevice(&mut dev) }, "cuCtxGetDevice");
        let mut errors = Vec::new();
        let mut module = None;
        for header in ptx_headers(Device::from_raw(dev)) {
            match load_module(&format!("{header}{PTX_BODY}")) {
                Ok(m) => {
                    module = Some(m);
                    break;
                }
                Err(e) => errors.push(format!("[{}] {e}", header.replace('\n', " ").trim())),
            }
        }
        let module = module
            .unwrap_or_else(|| panic!("the driver refused the test PTX: {}", errors.join("; ")));
        if !errors.is_empty() {
            eprintln!("note: PTX loaded after fallbacks: {}", errors.join("; "));
        }
        let get = |name: &CStr| {
            let mut f = ptr::null_mut();
            // SAFETY: `f` is a valid out-pointer; the module is loaded; `name` is NUL-terminated.
            check(
                unsafe { sys::cuModuleGetFunction(&mut f, module, name.as_ptr()) },
                "cuModuleGetFunction",
            );
            f
        };
        Kernels {
            ctx,
            module,
            spin: get(c"spin"),
            store_after_spin: get(c"store_after_spin"),
            copy_u32: get(c"copy_u32"),
            add_u32: get(c"add_u32"),
            _ctx: PhantomData,
        }
    }

    /// The context the kernels were loaded in.
    pub fn context_raw(&self) -> CUcontext {
        self.ctx
    }

    #[track_caller]
    fn launch(&self, f: CUfunction, stream: impl Enqueue, params: &mut [*mut c_void]) {
        let (raw, ctx) = stream.enqueue_handle();
        assert_eq!(
            ctx, self.ctx,
            "kernels launched on a stream of another context"
        );
        // Default-stream values (0x0/0x1/0x2) resolve through the current context.
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        let _bound = unsafe { bind_raw(self.ctx) };
        // SAFETY: `f` is a kernel of the loaded module; `params` holds one pointer per kernel
        // parameter, each to a value of the parameter's type, live for the call (the driver
        // copies the values at launch); the stream belongs to this context and is live.
        let rc = unsafe {
            sys::cuLaunchKernel(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                raw,
                params.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        check(rc, "cuLaunchKernel");
    }

    /// Enqueues `spin<<<1, 1>>>(ns)`: busy-waits on `%globaltimer` for at least `d`.
    #[track_caller]
    pub fn spin(&self, stream: impl Enqueue, d: Duration) {
        let mut ns = duration_ns(d);
        let mut params = [(&raw mut ns).cast::<c_void>()];
        self.launch(self.spin, stream, &mut params);
    }

    /// Enqueues `store_after_spin<<<1, 1>>>(p, value, ns)`: spins for at least `d`, then one
    /// thread writes `*p = value`.
    #[track_caller]
    pub fn store_after_spin(&self, stream: impl Enqueue, p: CUdeviceptr, value: u32, d: Duration) {
        let mut p = p;
        let mut value = value;
        let mut ns = duration_ns(d);
        let mut params = [
            (&raw mut p).cast::<c_void>(),
            (&raw mut value).cast::<c_void>(),
            (&raw mut ns).cast::<c_void>(),
        ];
        self.launch(self.store_after_spin, stream, &mut params);
    }

    /// Enqueues `*p = value` with no delay.
    #[track_caller]
    pub fn store(&self, stream: impl Enqueue, p: CUdeviceptr, value: u32) {
        self.store_after_spin(stream, p, value, Duration::ZERO);
    }

    /// Enqueues `copy_u32<<<1, 1>>>(dst, src)`: `*dst = *src`.
    #[track_caller]
    pub fn copy_u32(&self, stream: impl Enqueue, dst: CUdeviceptr, src: CUdeviceptr) {
        let mut dst = dst;
        let mut src = src;
        let mut params = [
            (&raw mut dst).cast::<c_void>(),
            (&raw mut src).cast::<c_void>(),
        ];
        self.launch(self.copy_u32, stream, &mut params);
    }

    /// Enqueues `add_u32<<<1, 1>>>(p, value)`: `atomicAdd(p, value)`.
    #[track_caller]
    pub fn add_u32(&self, stream: impl Enqueue, p: CUdeviceptr, value: u32) {
        let mut p = p;
        let mut value = value;
        let mut params = [
            (&raw mut p).cast::<c_void>(),
            (&raw mut value).cast::<c_void>(),
        ];
        self.launch(self.add_u32, stream, &mut params);
    }
}

impl Drop for Kernels<'_> {
    fn drop(&mut self) {
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        let _bound = unsafe { bind_raw(self.ctx) };
        // SAFETY: the module was loaded by this value and is unloaded once; its context is bound.
        let rc = unsafe { sys::cuModuleUnload(self.module) };
        if !std::thread::panicking() {
            check(rc, "cuModuleUnload");
        }
    }
}

//! A small kernel for the rows that need work on a stream: `csb_spin<<<1, 1>>>(ns)` busy-waits on
//! `%globaltimer` for at least `ns` nanoseconds. PTX, JIT-compiled by the driver once, untimed
//! (no toolkit needed); launched with the raw `cuLaunchKernel` on every side, so a row measures
//! what follows the kernel, not a launch API. Drivers without modules (the mock) leave the rows
//! that need it out, saying why.

use std::ffi::{CString, c_void};
use std::ptr;

use cuda_stream_sys as sys;

use crate::fail::ok;

const SPIN_PTX: &str = r#"
.visible .entry csb_spin(
	.param .u64 csb_spin_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [csb_spin_param_0];
	mov.u64 	%rd2, %globaltimer;
$L_spin_loop:
	mov.u64 	%rd3, %globaltimer;
	sub.u64 	%rd4, %rd3, %rd2;
	setp.lt.u64 	%p1, %rd4, %rd1;
	@%p1 bra 	$L_spin_loop;
	ret;
}
"#;

/// Tried in order until the driver accepts one: `sm_50` (JIT-compiled for any newer GPU), then
/// newer targets for a driver that refuses old ones.
pub(crate) const PTX_HEADERS: [&str; 3] = [
    ".version 7.0\n.target sm_50\n.address_size 64\n",
    ".version 7.0\n.target sm_75\n.address_size 64\n",
    ".version 7.8\n.target sm_90\n.address_size 64\n",
];

/// The loaded spin kernel (its module stays loaded for the life of the process).
#[derive(Clone, Copy)]
pub(crate) struct SpinKernel {
    launch: sys::pfn::cuLaunchKernel,
    f: sys::CUfunction,
}

impl SpinKernel {
    /// Loads the kernel in the current context, or says why it cannot.
    pub(crate) fn load() -> Result<SpinKernel, String> {
        let load = sys::fns::cuModuleLoadData().map_err(|e| e.to_string())?;
        let get = sys::fns::cuModuleGetFunction().map_err(|e| e.to_string())?;
        let launch = sys::fns::cuLaunchKernel().map_err(|e| e.to_string())?;
        let mut failures = Vec::new();
        for header in PTX_HEADERS {
            let image = CString::new(format!("{header}{SPIN_PTX}")).map_err(|e| e.to_string())?;
            let mut module = ptr::null_mut();
            // SAFETY: a NUL-terminated PTX image; a valid out-pointer; the context is current.
            let rc = unsafe { load(&mut module, image.as_ptr().cast()) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                failures.push(format!(
                    "{}: {}",
                    header.replace('\n', " ").trim(),
                    sys::result_name(rc)
                ));
                continue;
            }
            let mut f = ptr::null_mut();
            // SAFETY: the module is loaded (never unloaded); the name is NUL-terminated.
            let rc = unsafe { get(&mut f, module, c"csb_spin".as_ptr()) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                return Err(format!("cuModuleGetFunction: {}", sys::result_name(rc)));
            }
            return Ok(SpinKernel { launch, f });
        }
        Err(format!("cuModuleLoadData: {}", failures.join("; ")))
    }

    /// Enqueues `csb_spin<<<1, 1>>>(ns)` on `s`.
    #[inline(always)]
    pub(crate) fn spin(&self, s: sys::CUstream, ns: u64) {
        let mut ns = ns;
        let mut params = [(&raw mut ns).cast::<c_void>()];
        // SAFETY: `f` is the loaded kernel, of the context `s` belongs to; `params` holds one
        // pointer to a `u64`, its one parameter, live for the call (the driver copies it).
        let rc = unsafe {
            (self.launch)(
                self.f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                s,
                params.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        ok(rc, "cuLaunchKernel");
    }
}

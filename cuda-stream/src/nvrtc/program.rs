//! [`Program`]: CUDA C++ source with its headers, options and name expressions, compiled by
//! NVRTC into a [`CompiledProgram`].

use std::ffi::{CStr, CString, c_char};
use std::ptr;

use crate::base::error::{CompileLog, Error, Result};
use crate::driver::device::Device;
use crate::ffi::nvrtc::{nvrtcProgram, nvrtcResult, pfn};
use crate::nvrtc::arch::{Arch, CodeKind, choose, supported_archs};
use crate::nvrtc::call::{nvrtc_check, nvrtc_fn};
use crate::nvrtc::compiled::{Code, CompiledProgram};

/// The name a program has unless [`Program::name`] gives another: the file name NVRTC's log
/// gives each error's line under.
const DEFAULT_NAME: &str = "program.cu";

/// A CUDA C++ program for NVRTC: its source, the headers it may `#include` by name, compiler
/// options, and the name expressions (kernel templates' instances, such as `scale<float>`)
/// whose lowered names the compilation reports. Plain data, built by value; compiling makes a
/// [`CompiledProgram`] and leaves the `Program` as it was.
///
/// [`compile`](Program::compile) compiles it for a device, for the architecture of its compute
/// capability: CUBIN where the loaded NVRTC supports that architecture, PTX otherwise;
/// [`compile_for`](Program::compile_for) for any architecture (no GPU or driver needed), and
/// [`output`](Program::output) makes the choice of code explicit.
///
/// ```no_run
/// use cuda_stream::nvrtc::Program;
/// use cuda_stream::{Context, DeviceBuffer, LaunchConfig};
///
/// const SOURCE: &str = r#"
/// #include "scale.h"
/// template <typename T>
/// __global__ void scale(T *x, T a, unsigned n) {
///     unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
///     if (i < n) x[i] = times(x[i], a);
/// }
/// "#;
///
/// let ctx = Context::primary(0)?;
/// let compiled = Program::new(SOURCE)
///     .name("scale.cu")
///     .header("scale.h", "template <typename T> __device__ T times(T x, T a) { return x * a; }")
///     .option("-std=c++17")
///     .name_expression("scale<float>")
///     .compile(ctx.device())?; // CUBIN for this GPU where NVRTC supports it, else PTX
/// let module = compiled.load(&ctx)?;
/// let scale = module
///     .function(compiled.lowered_name("scale<float>")?)?
///     .typed::<(&mut DeviceBuffer<f32>, f32, u32)>()?;
/// let stream = ctx.new_stream()?;
/// let mut x = DeviceBuffer::from_host(&ctx, &stream, &[1.0f32; 1024])?;
/// // SAFETY: `scale` writes x[..n] only.
/// unsafe { scale.launch(&stream, LaunchConfig::for_elements(1024, 256), (&mut x, 3.0, 1024)) }?;
/// assert_eq!(x.to_vec(&stream)?, vec![3.0; 1024]);
/// # Ok::<(), cuda_stream::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    source: String,
    name: String,
    headers: Vec<(String, String)>,
    options: Vec<String>,
    name_expressions: Vec<String>,
    output: Option<CodeKind>,
}

impl Program {
    /// A program of this CUDA C++ source, named `program.cu`, with no headers, options or name
    /// expressions.
    pub fn new(source: impl Into<String>) -> Program {
        Program {
            source: source.into(),
            name: DEFAULT_NAME.to_string(),
            headers: Vec::new(),
            options: Vec::new(),
            name_expressions: Vec::new(),
            output: None,
        }
    }

    /// The program's file name, which NVRTC's log names each error's line by (`scale.cu(4):
    /// error: ...`).
    pub fn name(mut self, name: impl Into<String>) -> Program {
        self.name = name.into();
        self
    }

    /// A header the source (or another header) can `#include "name"`, with its text.
    pub fn header(mut self, name: impl Into<String>, source: impl Into<String>) -> Program {
        self.headers.push((name.into(), source.into()));
        self
    }

    /// A compiler option, such as `-std=c++17`, `--use_fast_math`, `-DN=4` or
    /// `-I/usr/local/cuda/include` (NVRTC's options are `nvcc`'s for device code). The
    /// architecture is not an option: it comes from the device or from
    /// [`compile_for`](Program::compile_for), and `-arch` / `--gpu-architecture` here is
    /// refused.
    pub fn option(mut self, option: impl Into<String>) -> Program {
        self.options.push(option.into());
        self
    }

    /// Several compiler options (see [`option`](Program::option)).
    pub fn options<I>(mut self, options: I) -> Program
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.options.extend(options.into_iter().map(Into::into));
        self
    }

    /// A name expression (`nvrtcAddNameExpression`): a kernel or `__device__` variable named
    /// as C++ would, such as `scale<float>` or `&table<int, 4>`, which the compilation
    /// instantiates and reports the lowered name of
    /// ([`CompiledProgram::lowered_name`]): the name a module finds a template's kernel by.
    pub fn name_expression(mut self, expression: impl Into<String>) -> Program {
        self.name_expressions.push(expression.into());
        self
    }

    /// Makes this kind of code for the architecture compiled for, instead of the default choice
    /// (CUBIN where the loaded NVRTC supports the architecture, else PTX for the newest
    /// architecture it supports below it). NVRTC refuses an architecture it does not support,
    /// with its log.
    pub fn output(mut self, kind: CodeKind) -> Program {
        self.output = Some(kind);
        self
    }

    /// Compiles the program for `device`: for the architecture of its compute capability
    /// ([`Arch::of`]), then as [`compile_for`](Program::compile_for).
    ///
    /// Where the output is left open and the driver cannot tell a cubin's kernel parameters
    /// (`cuFuncGetParamInfo`, CUDA 12.4), the program is compiled to PTX (for the same
    /// architecture as [`compile_for`](Program::compile_for) would choose), whose parameter
    /// lists are read when it is loaded: so its kernels can be declared with
    /// [`Function::typed`](crate::Function::typed) on every driver.
    pub fn compile(&self, device: Device) -> Result<CompiledProgram> {
        let arch = Arch::of(device)?;
        if self.output.is_none() && crate::ffi::fns::cuFuncGetParamInfo().is_err() {
            let (_, arch) = choose(arch, supported_archs());
            let mut ptx = self.clone();
            ptx.output = Some(CodeKind::Ptx);
            return ptx.compile_for(arch);
        }
        self.compile_for(arch)
    }

    /// Compiles the program for `arch`, without a GPU or driver. The code is the kind
    /// [`output`](Program::output) asked for (`-arch=sm_90` for CUBIN, `-arch=compute_90` for
    /// PTX); by default CUBIN where the loaded NVRTC supports `arch`
    /// ([`supported_archs`](crate::nvrtc::supported_archs)), else PTX for the newest
    /// architecture it supports below `arch`, which the driver JIT-compiles for the device.
    ///
    /// A program that does not compile is [`Error::NvrtcCompile`], whose `source()` is the
    /// compiler's log; NVRTC not found is [`Error::NvrtcLoad`], listing every place tried.
    pub fn compile_for(&self, arch: Arch) -> Result<CompiledProgram> {
        let (kind, arch) = match self.output {
            Some(kind) => (kind, arch),
            None => choose(arch, supported_archs()),
        };
        let arch_option = match kind {
            CodeKind::Cubin => format!("--gpu-architecture={}", arch.sm_name()),
            CodeKind::Ptx => format!("--gpu-architecture={}", arch.compute_name()),
        };
        let inputs = Inputs::new(self, arch_option)?;
        let handle = Handle::create(&inputs)?;
        let add = nvrtc_fn!(nvrtcAddNameExpression);
        for expr in &inputs.name_expressions {
            // SAFETY: a live program; a NUL-terminated string, which NVRTC copies.
            let rc = unsafe { add(handle.raw, expr.as_ptr()) };
            nvrtc_check(rc, "nvrtcAddNameExpression")?;
        }
        let compile = nvrtc_fn!(nvrtcCompileProgram);
        let options: Vec<*const c_char> = inputs.options.iter().map(|o| o.as_ptr()).collect();
        // SAFETY: a live program; `options` holds that many NUL-terminated strings, alive for
        // the call.
        let rc = unsafe { compile(handle.raw, options.len() as i32, options.as_ptr()) };
        if rc != nvrtcResult::NVRTC_SUCCESS {
            return Err(Error::NvrtcCompile {
                call: "nvrtcCompileProgram",
                code: rc,
                log: CompileLog(handle.log().unwrap_or_default()),
            });
        }
        let code = match kind {
            CodeKind::Ptx => {
                let mut text = handle.bytes(
                    (nvrtc_fn!(nvrtcGetPTXSize), "nvrtcGetPTXSize"),
                    (nvrtc_fn!(nvrtcGetPTX), "nvrtcGetPTX"),
                )?;
                while text.last() == Some(&0) {
                    text.pop();
                }
                Code::Ptx(String::from_utf8_lossy(&text).into_owned())
            }
            CodeKind::Cubin => Code::Cubin(handle.bytes(
                (nvrtc_fn!(nvrtcGetCUBINSize), "nvrtcGetCUBINSize"),
                (nvrtc_fn!(nvrtcGetCUBIN), "nvrtcGetCUBIN"),
            )?),
        };
        let lower = nvrtc_fn!(nvrtcGetLoweredName);
        let mut lowered = Vec::with_capacity(inputs.name_expressions.len());
        for (expr, c_expr) in self.name_expressions.iter().zip(&inputs.name_expressions) {
            let mut name: *const c_char = ptr::null();
            // SAFETY: a live, compiled program; the expression was added before compiling;
            // `name` is a valid out-pointer.
            let rc = unsafe { lower(handle.raw, c_expr.as_ptr(), &mut name) };
            nvrtc_check(rc, "nvrtcGetLoweredName")?;
            if name.is_null() {
                return Err(Error::NullHandle {
                    what: "lowered name",
                });
            }
            // SAFETY: NVRTC returned a NUL-terminated string that the program owns; it is
            // copied before the program is destroyed.
            let name = unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
            lowered.push((expr.clone(), name));
        }
        Ok(CompiledProgram {
            code,
            arch,
            log: handle.log()?,
            lowered,
        })
    }
}

/// A program's strings as NVRTC takes them, checked for `NUL` bytes, with the architecture's
/// option last.
struct Inputs {
    source: CString,
    name: CString,
    header_names: Vec<CString>,
    header_sources: Vec<CString>,
    options: Vec<CString>,
    name_expressions: Vec<CString>,
}

impl Inputs {
    fn new(program: &Program, arch_option: String) -> Result<Inputs> {
        let c = |what: &str, s: &str| {
            CString::new(s).map_err(|e| Error::InvalidArgument {
                reason: format!("{what} has a NUL byte at {}", e.nul_position()),
            })
        };
        for o in &program.options {
            let flag = o.split('=').next().unwrap_or("").trim();
            if matches!(flag, "-arch" | "--gpu-architecture") {
                return Err(Error::InvalidArgument {
                    reason: format!(
                        "option {o:?}: the architecture comes from the device or from \
                         Program::compile_for"
                    ),
                });
            }
        }
        let mut options = program
            .options
            .iter()
            .map(|o| c(&format!("option {o:?}"), o))
            .collect::<Result<Vec<_>>>()?;
        options.push(c("the architecture", &arch_option)?);
        Ok(Inputs {
            source: c("the program's source", &program.source)?,
            name: c("the program's name", &program.name)?,
            header_names: program
                .headers
                .iter()
                .map(|(n, _)| c(&format!("header name {n:?}"), n))
                .collect::<Result<_>>()?,
            header_sources: program
                .headers
                .iter()
                .map(|(n, s)| c(&format!("header {n:?}"), s))
                .collect::<Result<_>>()?,
            options,
            name_expressions: program
                .name_expressions
                .iter()
                .map(|e| c(&format!("name expression {e:?}"), e))
                .collect::<Result<_>>()?,
        })
    }
}

/// An NVRTC program, destroyed on drop.
struct Handle {
    raw: nvrtcProgram,
    destroy: pfn::nvrtcDestroyProgram,
}

impl Handle {
    /// `nvrtcCreateProgram` of `inputs`.
    fn create(inputs: &Inputs) -> Result<Handle> {
        let create = nvrtc_fn!(nvrtcCreateProgram);
        let destroy = nvrtc_fn!(nvrtcDestroyProgram);
        let names: Vec<*const c_char> = inputs.header_names.iter().map(|h| h.as_ptr()).collect();
        let sources: Vec<*const c_char> =
            inputs.header_sources.iter().map(|h| h.as_ptr()).collect();
        let count = i32::try_from(names.len()).map_err(|_| Error::InvalidArgument {
            reason: format!("{} headers are too many", names.len()),
        })?;
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; every string is NUL-terminated and alive for
        // the call (NVRTC copies them); the two header arrays hold `count` entries each.
        let rc = unsafe {
            create(
                &mut raw,
                inputs.source.as_ptr(),
                inputs.name.as_ptr(),
                count,
                sources.as_ptr(),
                names.as_ptr(),
            )
        };
        nvrtc_check(rc, "nvrtcCreateProgram")?;
        if raw.is_null() {
            return Err(Error::NullHandle {
                what: "NVRTC program",
            });
        }
        Ok(Handle { raw, destroy })
    }

    /// The program's log (`nvrtcGetProgramLog`), without its final `NUL`.
    fn log(&self) -> Result<String> {
        let size = nvrtc_fn!(nvrtcGetProgramLogSize);
        let get = nvrtc_fn!(nvrtcGetProgramLog);
        let bytes = self.bytes(
            (size, "nvrtcGetProgramLogSize"),
            (get, "nvrtcGetProgramLog"),
        )?;
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Ok(String::from_utf8_lossy(&bytes[..end])
            .trim_end()
            .to_string())
    }

    /// What one of NVRTC's size-then-copy pairs of functions gives.
    fn bytes(
        &self,
        (size, size_call): (SizeFn, &'static str),
        (get, get_call): (GetFn, &'static str),
    ) -> Result<Vec<u8>> {
        let mut n = 0usize;
        // SAFETY: a live program; `n` is a valid out-pointer.
        nvrtc_check(unsafe { size(self.raw, &mut n) }, size_call)?;
        let mut buf = vec![0u8; n];
        if n > 0 {
            // SAFETY: a live program; the buffer holds the `n` bytes NVRTC said it writes.
            nvrtc_check(unsafe { get(self.raw, buf.as_mut_ptr().cast()) }, get_call)?;
        }
        Ok(buf)
    }
}

/// `nvrtcGetPTXSize`, `nvrtcGetCUBINSize` and `nvrtcGetProgramLogSize` share this type.
type SizeFn = unsafe extern "C" fn(nvrtcProgram, *mut usize) -> nvrtcResult;
/// `nvrtcGetPTX`, `nvrtcGetCUBIN` and `nvrtcGetProgramLog` share this type.
type GetFn = unsafe extern "C" fn(nvrtcProgram, *mut c_char) -> nvrtcResult;

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the program is live and destroyed once; nothing borrowed from it outlives
        // the `Handle` (the lowered names and the code are copied out first).
        let _ = unsafe { (self.destroy)(&mut self.raw) };
    }
}

//! [`CompiledProgram`]: what NVRTC made of a program (its [`Code`], log and lowered names), and
//! loading it as a [`Module`].

use crate::base::error::{Error, Result};
use crate::driver::context::Context;
use crate::kernel::module::Module;
use crate::nvrtc::arch::{Arch, CodeKind};

/// The code a compilation made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Code {
    /// PTX text (`nvrtcGetPTX`, without its final `NUL`).
    Ptx(String),
    /// A CUBIN image (`nvrtcGetCUBIN`).
    Cubin(Vec<u8>),
}

impl Code {
    /// Which kind of code it is.
    pub fn kind(&self) -> CodeKind {
        match self {
            Code::Ptx(_) => CodeKind::Ptx,
            Code::Cubin(_) => CodeKind::Cubin,
        }
    }

    /// The code's bytes: the PTX text, or the CUBIN image.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Code::Ptx(text) => text.as_bytes(),
            Code::Cubin(image) => image,
        }
    }
}

/// A program NVRTC compiled ([`Program::compile`](crate::nvrtc::Program::compile)): its code for
/// one architecture, the compiler's log (warnings, empty for most programs), and the lowered
/// (mangled) name of each name expression the program declared. It holds no NVRTC handle: it can
/// be kept, cloned, sent to other threads and loaded into any number of contexts.
#[derive(Debug, Clone)]
pub struct CompiledProgram {
    pub(crate) code: Code,
    pub(crate) arch: Arch,
    pub(crate) log: String,
    /// `(name expression, lowered name)`, in the order the program declared them.
    pub(crate) lowered: Vec<(String, String)>,
}

impl CompiledProgram {
    /// The code NVRTC made.
    pub fn code(&self) -> &Code {
        &self.code
    }

    /// The code, taken out.
    pub fn into_code(self) -> Code {
        self.code
    }

    /// The architecture the code is for: a real one for CUBIN, a virtual one for PTX (the
    /// driver JIT-compiles it for any device of this architecture or newer).
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// What the compiler wrote to the program's log (warnings; empty for most programs).
    pub fn log(&self) -> &str {
        &self.log
    }

    /// The lowered (mangled) name of `name_expression`, one the program declared with
    /// [`Program::name_expression`](crate::nvrtc::Program::name_expression): the name
    /// [`Module::function`] finds the kernel by, such as `_Z5scaleIfEvPT_S0_j` for
    /// `scale<float>`. Any other expression is [`Error::InvalidArgument`].
    pub fn lowered_name(&self, name_expression: &str) -> Result<&str> {
        self.lowered
            .iter()
            .find(|(expr, _)| expr == name_expression)
            .map(|(_, lowered)| lowered.as_str())
            .ok_or_else(|| Error::InvalidArgument {
                reason: format!("`{name_expression}` is not a name expression of the program"),
            })
    }

    /// Every name expression of the program with its lowered name, in the order declared.
    pub fn lowered_names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.lowered.iter().map(|(e, l)| (e.as_str(), l.as_str()))
    }

    /// Loads the code into `ctx` as a [`Module`]: PTX with [`Module::from_ptx`] (the driver
    /// JIT-compiles it; a failure is [`Error::ModuleLoad`] with the JIT's log), CUBIN with
    /// [`Module::from_image`]. Its kernels are then found by name, a template's by its lowered
    /// name, and launched, typed or not, as any module's.
    pub fn load(&self, ctx: &Context) -> Result<Module> {
        match &self.code {
            Code::Ptx(text) => Module::from_ptx(ctx, text),
            // SAFETY: the image is the complete CUBIN that NVRTC wrote, as many bytes as
            // `nvrtcGetCUBINSize` said: a well-formed image the driver reads to its end.
            Code::Cubin(image) => unsafe { Module::from_image(ctx, image) },
        }
    }
}

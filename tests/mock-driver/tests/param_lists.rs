//! Kernel parameter lists against the mock driver, on every driver flavour (each in a child
//! process, through [`parameter_lists_behave_on_every_driver_flavour`]): the parameters the
//! crate reads from PTX written in the forms the PTX ISA allows (`.visible.entry` without a
//! space, `.weak`, hex and octal array sizes, two-dimensional arrays, vectors, `.ptr.global` run
//! together, comments anywhere, performance directives after the list, a `.func` beside the
//! kernels); a kernel whose list the crate cannot read (a preprocessor directive in the text),
//! which `Function::typed` refuses and `typed_unchecked` takes on the caller's word; and a raw
//! argument of 0 bytes, which is a size like any other, never "unchecked".
//!
//! Where the flavour has `cuFuncGetParamInfo` (CUDA 12.4 on), the tests make it answer
//! `CUDA_ERROR_NOT_SUPPORTED`, as the driver does for a kernel it cannot describe, so that the
//! PTX decides; one test lets the driver answer.

use std::sync::{Mutex, MutexGuard, OnceLock};

use cuda_mock_driver::{FLAVOURS, Flavour, MockDriver, report, run_in_each_flavour};
use cuda_stream::ffi::CUresult;
use cuda_stream::{
    ArgMismatch, Context, DeviceBuffer, Error, KernelArg, LaunchConfig, Module, ParamInfo,
    ParamKind,
};

/// Kernels declared in forms the PTX ISA allows and the mock reads too; the comments and the
/// `.func` must not be taken for kernels.
const FORMS: &str = r#"
.version 8.0
.target sm_80
.address_size 64

// .visible .entry commented_out(.param .u32 c)
/* .visible .entry also_commented_out(
       .param .u64 a) */
.func (.param .b32 helper_ret) helper(.param .b32 helper_x)
{
    st.param.b32 [helper_ret], 0;
    ret;
}

.visible.entry nospace(.param .u64 .ptr.global.align 16 nospace_p, .param .u32 nospace_n)
{
    ret;
}

.weak .entry weak_kernel( /* a struct of 32 bytes, then 8 bytes */
    .param .align 16 .b8 weak_kernel_s[0x20],
    .param .b8 weak_kernel_o[010]
)
.minnctapersm 2 .maxntid 64, 1, 1
{
    ret;
}

.visible .entry arrays(.param .u32 arrays_m[2][3], .param .v2 .f32 arrays_v,
    .param .f16x2 arrays_h)
.reqntid 32
{
    ret;
}
"#;

/// A kernel the mock reads and the crate does not: PTX may be run through the C preprocessor,
/// so after a `#define` no token can be taken at its word.
const PREPROCESSED: &str = r#"
.version 8.0
.target sm_80
.address_size 64
#define WIDTH 16
.visible .entry unknown(.param .u64 unknown_p, .param .u32 unknown_n)
{
    ret;
}
"#;

static LOCK: Mutex<()> = Mutex::new(());

fn flavour() -> &'static Flavour {
    Flavour::from_env().unwrap_or(Flavour::full())
}

/// Serialises the test, installs this process's flavour as the driver (once) and resets it.
fn mock() -> (MutexGuard<'static, ()>, &'static MockDriver) {
    static MOCK: OnceLock<MockDriver> = OnceLock::new();
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MOCK.get_or_init(|| {
        let path = flavour().path();
        // SAFETY: the mock driver, built with this test.
        let driver =
            unsafe { cuda_stream_sys::Driver::open(&path) }.expect("the mock driver library opens");
        cuda_stream_sys::Driver::install_global(driver).expect("nothing loaded a driver before");
        // SAFETY: the mock driver, built with this test.
        unsafe { MockDriver::open(&path) }.expect("the mock's control functions resolve")
    });
    m.reset();
    (guard, m)
}

/// Makes `cuFuncGetParamInfo` answer `CUDA_ERROR_NOT_SUPPORTED` where the flavour has it, so
/// that the parameters come from the PTX.
fn ptx_decides(m: &MockDriver) {
    if flavour().has_abi("cuFuncGetParamInfo") {
        m.fail_always("cuFuncGetParamInfo", CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
}

fn p(size: u32, kind: ParamKind) -> ParamInfo {
    ParamInfo { size, kind }
}

fn mismatch(e: Error) -> (String, ArgMismatch) {
    match e {
        Error::ArgumentMismatch { kernel, mismatch } => (kernel, mismatch),
        other => panic!("not a mismatch: {other:?}"),
    }
}

#[test]
fn parameters_are_read_in_every_form_the_isa_allows() {
    let (_lock, m) = mock();
    ptx_decides(m);
    let ctx = Context::primary(0).unwrap();
    let module = Module::from_ptx(&ctx, FORMS).unwrap();
    let params = |name: &str| module.function(name).unwrap().params().map(<[_]>::to_vec);
    use ParamKind::{Any, Float, Integer, Pointer};
    assert_eq!(params("nospace"), Some(vec![p(8, Pointer), p(4, Integer)]));
    assert_eq!(params("weak_kernel"), Some(vec![p(32, Any), p(8, Any)]));
    assert_eq!(
        params("arrays"),
        Some(vec![p(24, Any), p(8, Any), p(4, Float)])
    );
    assert_eq!(
        module
            .function("weak_kernel")
            .unwrap()
            .max_threads_per_block(),
        64
    );

    // Typed against what was read: a 4-byte integer for the pointer is refused.
    let nospace = module.function("nospace").unwrap();
    let e = nospace.typed::<(u32, u32)>().unwrap_err();
    assert_eq!(
        mismatch(e),
        (
            "nospace".to_string(),
            ArgMismatch::Size {
                index: 0,
                param: 8,
                arg: 4
            }
        )
    );
    let typed = nospace.typed::<(&mut DeviceBuffer<u32>, u32)>().unwrap();
    let stream = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 4).unwrap();
    // SAFETY: the kernel does nothing.
    unsafe { typed.launch(&stream, LaunchConfig::new(1, 4), (&mut x, 4)) }.unwrap();
    let launch = m.last_launch().unwrap();
    assert_eq!(
        launch.params,
        vec![
            x.device_ptr().to_ne_bytes().to_vec(),
            4u32.to_ne_bytes().to_vec()
        ]
    );
    stream.synchronize().unwrap();
}

#[test]
fn typed_refuses_a_kernel_whose_parameters_are_unknown() {
    let (_lock, m) = mock();
    ptx_decides(m);
    let ctx = Context::primary(0).unwrap();
    let module = Module::from_ptx(&ctx, PREPROCESSED).unwrap();
    let unknown = module.function("unknown").unwrap();
    assert_eq!(unknown.params(), None);
    let e = unknown.typed::<(u32, u32)>().unwrap_err();
    assert!(
        matches!(&e, Error::UnknownParameters { kernel } if kernel == "unknown"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "the parameters of kernel `unknown` are unknown"
    );
    assert!(unknown.typed::<(&mut DeviceBuffer<u32>, u32)>().is_err());

    // On the caller's word: launched as declared.
    // SAFETY: the kernel takes a pointer and a `.u32`, as the PTX says.
    let typed = unsafe { unknown.typed_unchecked::<(&mut DeviceBuffer<u32>, u32)>() };
    let stream = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 4).unwrap();
    // SAFETY: the kernel does nothing.
    unsafe { typed.launch(&stream, LaunchConfig::new(1, 4), (&mut x, 7)) }.unwrap();
    assert_eq!(
        m.last_launch().unwrap().params,
        vec![
            x.device_ptr().to_ne_bytes().to_vec(),
            7u32.to_ne_bytes().to_vec()
        ]
    );
    stream.synchronize().unwrap();
}

/// Where the driver describes the kernel (`cuFuncGetParamInfo`, CUDA 12.4 on), its account is
/// the parameters, whatever the PTX reader made of the text.
#[test]
fn the_driver_knows_what_the_ptx_reader_does_not() {
    let (_lock, _m) = mock();
    let ctx = Context::primary(0).unwrap();
    let module = Module::from_ptx(&ctx, PREPROCESSED).unwrap();
    let unknown = module.function("unknown").unwrap();
    if !flavour().has_abi("cuFuncGetParamInfo") {
        assert_eq!(unknown.params(), None);
        return;
    }
    use ParamKind::Any;
    assert_eq!(unknown.params(), Some(&[p(8, Any), p(4, Any)][..]));
    unknown.typed::<(u64, u32)>().unwrap();
    let e = unknown.typed::<(u32, u32)>().unwrap_err();
    assert!(matches!(mismatch(e).1, ArgMismatch::Size { index: 0, .. }));
}

#[test]
fn a_raw_argument_of_zero_bytes_is_checked_like_any_size() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let module = Module::from_ptx(&ctx, FORMS).unwrap();
    let nospace = module.function("nospace").unwrap();
    let stream = ctx.new_stream().unwrap();
    let (value, n) = (0u64, 4u32);
    let launches = m.calls("cuLaunchKernel");
    let empty = KernelArg::from_ptr_sized((&value as *const u64).cast(), 0);
    assert_eq!(empty.size(), Some(0));
    // SAFETY: refused before the driver is called: 0 bytes for an 8-byte parameter.
    let e = unsafe {
        nospace.launch(
            &stream,
            LaunchConfig::new(1, 1),
            &[empty, KernelArg::new(&n)],
        )
    };
    assert_eq!(
        mismatch(e.unwrap_err()).1,
        ArgMismatch::Size {
            index: 0,
            param: 8,
            arg: 0
        }
    );
    assert_eq!(
        m.calls("cuLaunchKernel"),
        launches,
        "nothing reached the driver"
    );

    // A raw pointer of unknown size is the one argument whose size is not checked.
    let unsized_arg = KernelArg::from_ptr((&value as *const u64).cast());
    assert_eq!(unsized_arg.size(), None);
    assert_eq!(KernelArg::new(&n).size(), Some(4));
    // SAFETY: `value` is the 8-byte pointer parameter's value (never dereferenced: the kernel
    // does nothing).
    unsafe {
        nospace.launch(
            &stream,
            LaunchConfig::new(1, 1),
            &[unsized_arg, KernelArg::new(&n)],
        )
    }
    .unwrap();
    assert_eq!(m.calls("cuLaunchKernel"), launches + 1);
    stream.synchronize().unwrap();
}

/// Runs the tests above again against every other flavour, one child process each.
#[test]
fn parameter_lists_behave_on_every_driver_flavour() {
    if Flavour::from_env().is_some() {
        return;
    }
    let others: Vec<&'static Flavour> = FLAVOURS.iter().filter(|f| *f != Flavour::full()).collect();
    let runs = run_in_each_flavour(
        &others,
        &[
            "--test-threads=1",
            "--skip",
            "parameter_lists_behave_on_every_driver_flavour",
        ],
        &[],
    );
    let mut failed = Vec::new();
    for r in &runs {
        let ok = r.lines_containing("test result: ok. 4 passed");
        report(&format!(
            "parameter lists ({}): {}",
            r.flavour.name,
            if ok.len() == 1 { "4 passed" } else { "FAILED" }
        ));
        if !r.status.success() || ok.len() != 1 {
            failed.push(r.failure_report());
        }
    }
    assert_eq!(runs.len(), FLAVOURS.len() - 1);
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

//! The crate's PTX reader against the real JIT compiler and `cuFuncGetParamInfo`: PTX in the
//! forms the PTX ISA documents and compilers emit loads, and every kernel's parameters, as
//! `Function::params` gives them, are the sizes the driver reports with the kinds the reader
//! read (which it keeps only where its sizes agree with the driver's). Forms the ISA leaves in
//! doubt (`.visible.entry` without a space, vectors and two-dimensional arrays as parameters, a
//! `#define`, a line continuation) are probed one module each: the test prints whether the JIT
//! compiler accepts each, and where it does, checks that the reader agrees with the driver or
//! says unknown (never a wrong size). Under `CUDA_SYS_ABI_VERSION=12.0` (no
//! `cuFuncGetParamInfo`) the reader alone answers, and the same expectations hold.

use cuda_stream::{DeviceBuffer, Error, LaunchConfig, Module, ParamInfo, ParamKind};
use cuda_stream_tests::{alongside_others, error_chain, gpu};

use ParamKind::{Any, Float, Integer, Pointer};

fn p(size: u32, kind: ParamKind) -> ParamInfo {
    ParamInfo { size, kind }
}

/// Forms the PTX ISA documents (sections 5.1.6 and 11.2.1, and their examples): each must load.
const DOCUMENTED: &str = r#"
.version 7.0
.target sm_50
.address_size 64

// .visible .entry commented_out(.param .u32 c)
/* .visible .entry also_commented_out(
       .param .u64 a) */
.func (.param .b32 helper_ret) helper(.param .b32 helper_x)
{
    st.param.b32 [helper_ret], 0;
    ret;
}

.visible .entry structs( /* a struct of 32 bytes, 8 bytes, a count */
    .param .align 16 .b8 structs_s[0x20],
    .param .b8 structs_o[010],
    .param .u32 structs_n
)
.maxntid 64, 1, 1
.minnctapersm 2
{
    ret;
}

.visible .entry ptrs(.param .u64 .ptr.global.align 16 ptrs_p,
                     .param .u64 .ptr .align 8 ptrs_q, // generic
                     .param .f32 ptrs_a)
{
    ret;
}

.entry plain ( .param .s32 plain_pitch, .param .align 4 .s32 plain_row[8], .param .f64 plain_d )
.reqntid 32, 1, 1
{
    ret;
}
"#;

/// What the reader must make of [`DOCUMENTED`].
fn documented() -> Vec<(&'static str, Vec<ParamInfo>)> {
    vec![
        ("structs", vec![p(32, Any), p(8, Any), p(4, Integer)]),
        ("ptrs", vec![p(8, Pointer), p(8, Pointer), p(4, Float)]),
        ("plain", vec![p(4, Integer), p(32, Any), p(8, Float)]),
    ]
}

/// Whether the driver describes kernels itself (`cuFuncGetParamInfo`, CUDA 12.4 on, within the
/// ABI limit).
fn driver_describes_kernels() -> bool {
    cuda_stream::ffi::fns::cuFuncGetParamInfo().is_ok()
}

#[test]
fn documented_forms_load_and_the_reader_agrees_with_the_driver() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let module = Module::from_ptx(&ctx, DOCUMENTED)
        .unwrap_or_else(|e| panic!("the documented forms: {}", error_chain(&e)));
    for (name, want) in documented() {
        let f = module.function(name).unwrap();
        assert_eq!(f.params(), Some(&want[..]), "{name}");
    }
    assert!(matches!(
        module.function("helper"),
        Err(Error::FunctionNotFound { .. })
    ));
    assert!(module.function("commented_out").is_err());
    // A typed launch of what was read.
    let ptrs = module
        .function("ptrs")
        .unwrap()
        .typed::<(&mut DeviceBuffer<u32>, &DeviceBuffer<u32>, f32)>()
        .unwrap();
    let stream = ctx.new_stream().unwrap();
    let mut a = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 4).unwrap();
    let b = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 4).unwrap();
    // SAFETY: the kernel does nothing.
    unsafe { ptrs.launch(&stream, LaunchConfig::new(1, 32), (&mut a, &b, 1.0)) }.unwrap();
    stream.synchronize().unwrap();
    println!(
        "documented PTX forms: loaded, {} kernels read as the {} says",
        documented().len(),
        if driver_describes_kernels() {
            "driver"
        } else {
            "PTX"
        }
    );
}

/// A form whose acceptance the ISA leaves in doubt, in a module of its own, with what the reader
/// makes of its kernel `k` (`None`: unknown).
struct Probe {
    form: &'static str,
    body: &'static str,
    reader: Option<Vec<ParamInfo>>,
}

fn probes() -> Vec<Probe> {
    vec![
        Probe {
            form: "`.visible.entry` without a space",
            body: ".visible.entry k(.param .u64 k_p, .param .u32 k_n) { ret; }",
            reader: Some(vec![p(8, Integer), p(4, Integer)]),
        },
        Probe {
            form: "`.weak .entry`",
            body: ".weak .entry k(.param .u64 k_p, .param .f32 k_a) { ret; }",
            reader: Some(vec![p(8, Integer), p(4, Float)]),
        },
        Probe {
            form: "a `.v2 .f32` and a `.v4 .u32` parameter",
            body: ".visible .entry k(.param .v2 .f32 k_v, .param .v4 .u32 k_w, .param .u32 k_n) \
                   { ret; }",
            reader: Some(vec![p(8, Any), p(16, Any), p(4, Integer)]),
        },
        Probe {
            form: "a two-dimensional array parameter",
            body: ".visible .entry k(.param .u32 k_m[2][3], .param .f32 k_a) { ret; }",
            reader: Some(vec![p(24, Any), p(4, Float)]),
        },
        Probe {
            form: "binary and suffixed array sizes",
            body: ".visible .entry k(.param .b8 k_s[0b1000], .param .b8 k_t[16U], \
                   .param .u32 k_n) { ret; }",
            reader: Some(vec![p(8, Any), p(16, Any), p(4, Integer)]),
        },
        Probe {
            form: "a `#define`",
            body: "#define WIDTH 16\n.visible .entry k(.param .b8 k_s[WIDTH], .param .u32 k_n) \
                   { ret; }",
            reader: None,
        },
        Probe {
            form: "a line continuation",
            body: ".visible .entry k(.param .u64 k_p, \\\n.param .u32 k_n) { ret; }",
            reader: None,
        },
        Probe {
            form: "a `.texref` parameter",
            body: ".visible .entry k(.param .texref k_t, .param .u32 k_n) { ret; }",
            reader: None,
        },
    ]
}

#[test]
fn forms_in_doubt_are_read_as_the_driver_reads_them_or_left_unknown() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let describes = driver_describes_kernels();
    for probe in probes() {
        let text = format!(
            ".version 7.0\n.target sm_50\n.address_size 64\n{}\n",
            probe.body
        );
        let module = match Module::from_ptx(&ctx, &text) {
            Ok(m) => m,
            Err(e) => {
                let why = error_chain(&e);
                println!(
                    "ptx form {}: the JIT compiler refuses it ({why})",
                    probe.form
                );
                continue;
            }
        };
        let f = module.function("k").unwrap();
        let params = f.params().map(<[_]>::to_vec);
        match (&probe.reader, describes) {
            // Read: the reader's kinds survive only where its sizes are the driver's.
            (Some(want), _) => assert_eq!(params.as_ref(), Some(want), "{}", probe.form),
            // Unknown to the reader: the driver's sizes, no kind guessed; or nothing at all.
            (None, true) => {
                let driver = params.as_ref().expect("the driver describes the kernel");
                assert!(driver.iter().all(|p| p.kind == Any), "{}", probe.form);
            }
            (None, false) => {
                assert_eq!(params, None, "{}", probe.form);
                assert!(matches!(
                    f.typed::<(u64, u32)>(),
                    Err(Error::UnknownParameters { .. })
                ));
            }
        }
        println!(
            "ptx form {}: the JIT compiler accepts it; parameters {}",
            probe.form,
            match (&probe.reader, &params) {
                (Some(_), _) => "read as the driver reads them".to_string(),
                (None, Some(p)) => format!("unknown to the reader, {} from the driver", p.len()),
                (None, None) => "unknown (typed refuses the kernel)".to_string(),
            }
        );
    }
}

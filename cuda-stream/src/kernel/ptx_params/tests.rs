//! The PTX reader on the forms the PTX ISA allows, on text it must leave unknown, on samples in
//! the forms nvcc, NVRTC and LLVM emit (`cuda-stream/tests/ptx/`, each saying what it was
//! modelled on), and on every PTX module of this workspace.

use super::*;

use ParamKind::{Any, Float, Integer, Pointer};

fn p(size: u32, kind: ParamKind) -> ParamInfo {
    ParamInfo { size, kind }
}

const HEADER: &str = ".version 8.0\n.target sm_80\n.address_size 64\n";

/// The entries of `body` after a header.
fn read_body(body: &str) -> Vec<(String, Vec<ParamInfo>)> {
    entries(&format!("{HEADER}{body}"))
}

/// The parameters of the one kernel of `body`, if they can be read.
fn one(body: &str) -> Option<Vec<ParamInfo>> {
    let e = read_body(body);
    assert!(e.len() <= 1, "{e:?}");
    e.into_iter().next().map(|(_, p)| p)
}

fn names(e: &[(String, Vec<ParamInfo>)]) -> Vec<&str> {
    e.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn the_entry_directive_with_any_whitespace_or_none() {
    let expect = Some(vec![p(8, Integer), p(4, Float)]);
    for body in [
        ".entry k(.param .u64 a, .param .f32 b) { ret; }",
        ".visible .entry k(.param .u64 a, .param .f32 b) { ret; }",
        ".visible.entry k(.param .u64 a,.param .f32 b){ret;}",
        ".weak .entry k(.param .u64 a, .param .f32 b) { ret; }",
        "\t.visible\n\t.entry\n\tk\n(\n\t.param\n\t.u64\ta\n,\n.param .f32 b\n)\n{\n\tret;\n}\n",
        ".visible\r\n.entry k(\r\n.param .u64 a,\r\n.param .f32 b\r\n)\r\n{\r\nret;\r\n}\r\n",
        ".visible .entry k /* a kernel */ ( // its parameters:\n .param /* state space */ .u64 \
         a /* , .param .u8 z */, .param .f32/**/b) // done\n{ ret; }",
        ".extern .entry k(.param .u64 a, .param .f32 b);",
    ] {
        assert_eq!(one(body), expect, "{body}");
    }
}

#[test]
fn every_declaration_form_of_a_kernel_parameter() {
    let cases: &[(&str, u32, ParamKind)] = &[
        (".param .u8 x", 1, Integer),
        (".param .s16 x", 2, Integer),
        (".param .u32 x", 4, Integer),
        (".param .s64 x", 8, Integer),
        (".param .b8 x", 1, Any),
        (".param .b16 x", 2, Any),
        (".param .b32 x", 4, Any),
        (".param .b64 x", 8, Any),
        (".param .b128 x", 16, Any),
        (".param .f16 x", 2, Float),
        (".param .bf16 x", 2, Float),
        (".param .f16x2 x", 4, Float),
        (".param .bf16x2 x", 4, Float),
        (".param .f32 x", 4, Float),
        (".param .f64 x", 8, Float),
        (".param .align 16 .b8 x[48]", 48, Any),
        (".param .align 0x10 .b8 x[0x30]", 48, Any),
        (".param .b8 x[0X30U]", 48, Any),
        (".param .b8 x[060]", 48, Any),
        (".param .b8 x[0b110000]", 48, Any),
        (".param .b8 x [ 48 ]", 48, Any),
        (".param .u32 x[2][3]", 24, Any),
        (".param .align 4 .s32 pitch[8000]", 32000, Any),
        (".param .v2 .f32 x", 8, Any),
        (".param .v4 .u32 x", 16, Any),
        (".param .align 16 .v4 .f32 x", 16, Any),
        (".param .u64 .ptr x", 8, Pointer),
        (".param .u64 .ptr .global x", 8, Pointer),
        (".param .u64 .ptr .global .align 16 x", 8, Pointer),
        (".param .u64 .ptr.global.align 16 x", 8, Pointer),
        (".param .u32 .ptr.const.align 8 x", 4, Pointer),
        (".param .u64 .ptr .align 1 x", 8, Pointer),
        (".param .b64 .ptr .shared x", 8, Pointer),
        (".param .u64 .ptr .local .align 8 x", 8, Pointer),
    ];
    for &(decl, size, kind) in cases {
        let body = format!(".visible .entry k({decl}) {{ ret; }}");
        assert_eq!(one(&body), Some(vec![p(size, kind)]), "{decl}");
    }
}

#[test]
fn what_the_reader_does_not_understand_leaves_the_kernel_unknown() {
    for decl in [
        ".param .texref t",
        ".param .samplerref s",
        ".param .surfref s",
        ".param .pred p",
        ".param .e4m3x2 x",
        ".param .u32",
        ".param x",
        ".reg .u32 x",
        ".param .u32 x = 5",
        ".param .b8 x[]",
        ".param .b8 x[0]",
        ".param .b8 x[2*8]",
        ".param .b8 x[WARP_SZ]",
        ".param .b8 x[16u]",
        ".param .b8 x[089]",
        ".param .b8 x[1.5]",
        ".param .b8 x[16",
        ".param .v8 .f32 x",
        ".param .v2 .v2 .f32 x",
        ".param .f32 .ptr x",
        ".param .u64 .ptr .global .global x",
        ".param .u64 .ptr .param x",
        ".param .v2 .u64 .ptr x",
        ".param .u64 x .align 8",
        ".hidden .param .u64 x",
        ".param .attribute(.managed) .u64 x",
        ".param .u64 x, ",
        ".param .b8 x[4294967296][2]",
    ] {
        let body = format!(".visible .entry k({decl}) {{ ret; }} .entry known() {{ ret; }}");
        let e = read_body(&body);
        assert_eq!(names(&e), ["known"], "{decl}");
    }
    // A list after a performance directive, or a second list.
    assert_eq!(one(".entry k .maxntid 32 (.param .u32 x) { ret; }"), None);
    assert_eq!(one(".entry k(.param .u32 x)(.param .u32 y) { ret; }"), None);
}

#[test]
fn text_that_may_need_the_preprocessor_leaves_every_kernel_unknown() {
    for text in [
        format!("{HEADER}#define N 16\n.entry k(.param .b8 x[N]) {{ ret; }}"),
        format!("{HEADER}#include \"params.h\"\n.entry k(.param .u32 x) {{ ret; }}"),
        format!("{HEADER}.entry k(.param .u32 x,\\\n .param .u32 y) {{ ret; }}"),
        format!("{HEADER}\n  # 1 \"k.cu\"\n.entry k(.param .u32 x) {{ ret; }}"),
        format!("{HEADER}// a comment \\\n.entry k(.param .u32 x) {{ ret; }}"),
        format!("{HEADER}.file 1 \"k\\\r\n.cu\"\n.entry k(.param .u32 x) {{ ret; }}"),
    ] {
        assert!(entries(&text).is_empty(), "{text}");
    }
    // In a comment or a string, `#` and `\` are text.
    let text = format!(
        "{HEADER}// #define N 16 \\ not at the end\n/* #if 0 */\n.file 1 \"C:\\\\src\\\\#1\\\\k.cu\"\n\
         .entry k(.param .u32 x) {{ ret; }}"
    );
    assert_eq!(names(&entries(&text)), ["k"]);
}

#[test]
fn text_it_cannot_tokenize_or_too_old_leaves_every_kernel_unknown() {
    let kernel = ".entry k(.param .u32 x) { ret; }";
    for text in [
        // No `.version`, or one this reader cannot parse.
        kernel.to_string(),
        format!(".version 8\n{kernel}"),
        // PTX ISA 1.0 to 1.3 declared parameters in the kernel body.
        ".version 1.3\n.target sm_10\n.entry k { .param .u32 x; ret; }".to_string(),
        // Unterminated comment or string, an unbalanced brace, non-ASCII text outside both.
        format!("{HEADER}{kernel} /* open"),
        format!("{HEADER}.file 1 \"open\n{kernel}"),
        format!("{HEADER}}}\n{kernel}"),
        format!("{HEADER}.entry k(.param .u32 \u{00e9}) {{ ret; }}"),
        // A `.entry` without a name, or without an end.
        format!("{HEADER}.entry (.param .u32 x) {{ ret; }}"),
        format!("{HEADER}.entry k(.param .u32 x)"),
    ] {
        assert!(entries(&text).is_empty(), "{text}");
    }
    // Non-ASCII text in comments and strings is fine; 1.4 is the first version read.
    let text = format!(
        ".version 1.4\n.target sm_10\n// caf\u{00e9}\n.file 1 \"/tmp/caf\u{00e9}.cu\"\n{kernel}"
    );
    assert_eq!(names(&entries(&text)), ["k"]);
}

#[test]
fn only_top_level_entries_are_kernels() {
    let e = read_body(
        "// .entry in_a_line_comment(.param .u32 x) { }\n\
         /* .visible .entry in_a_block_comment(.param .u32 x) { } */\n\
         .file 1 \"/src/.entry in_a_string(.param .u32 x) {.cu\"\n\
         .func (.param .b32 r) device_function(.param .b32 a) { ret; }\n\
         .extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);\n\
         .visible .entry kernel(.param .u32 x)\n\
         {\n\
             { .param .b32 param0; st.param.b32 [param0], 0; }\n\
             mov.u32 %r1, entry;\n\
             ret;\n\
         }\n\
         .section .debug_str { $L__info_string0: .b8 46, 101, 110, 116, 114, 121, 0 }",
    );
    assert_eq!(e, [("kernel".to_string(), vec![p(4, Integer)])]);
}

#[test]
fn no_parameters_and_performance_directives_after_the_list() {
    let e = read_body(
        ".visible .entry a() { ret; }\n\
         .entry b { ret; }\n\
         .entry c .maxntid 128, 2, 1 { ret; }\n\
         .visible .entry d(.param .u64 d_0)\n.maxntid 256, 1, 1\n.minnctapersm 2\n{ ret; }\n\
         .visible .entry e(.param .u32 e_0) .reqntid 32, 1, 1 .maxnreg 64 { ret; }\n\
         .visible .entry f(.param .u32 f_0) .explicitcluster .reqnctapercluster 2, 2, 1 \
         .maxclusterrank 8 .noreturn .pragma \"nounroll\"; \n",
    );
    assert_eq!(
        e,
        [
            ("a".to_string(), vec![]),
            ("b".to_string(), vec![]),
            ("c".to_string(), vec![]),
            ("d".to_string(), vec![p(8, Integer)]),
            ("e".to_string(), vec![p(4, Integer)]),
            ("f".to_string(), vec![p(4, Integer)]),
        ]
    );
}

#[test]
fn a_kernel_declared_twice_counts_only_if_both_agree() {
    let e = read_body(
        ".extern .entry same(.param .u32 x);\n.visible .entry same(.param .u32 x) { ret; }\n\
         .extern .entry other(.param .u32 x);\n.visible .entry other(.param .u64 x) { ret; }\n\
         .extern .entry half(.param .texref t);\n.visible .entry half(.param .u64 x) { ret; }\n",
    );
    assert_eq!(e, [("same".to_string(), vec![p(4, Integer)])]);
}

#[test]
fn integer_literals_as_the_isa_writes_them() {
    for (t, v) in [
        ("0", Some(0)),
        ("7", Some(7)),
        ("16", Some(16)),
        ("16U", Some(16)),
        ("0x1f", Some(31)),
        ("0X1F", Some(31)),
        ("017", Some(15)),
        ("0b101", Some(5)),
        ("0B101U", Some(5)),
        ("08", None),
        ("0x", None),
        ("0b2", None),
        ("1e3", None),
        ("16u", None),
        ("", None),
    ] {
        assert_eq!(int_literal(t), v, "{t}");
    }
}

/// The samples in `cuda-stream/tests/ptx/`, written in the forms compilers emit.
#[test]
fn samples_in_the_forms_compilers_emit() {
    let nvcc = entries(include_str!("../../../tests/ptx/nvcc_12.ptx"));
    assert_eq!(
        nvcc,
        [
            (
                "read_from_struct".to_string(),
                vec![p(56, Any), p(8, Integer)]
            ),
            (
                "_Z6boundsPKdPdmbf".to_string(),
                vec![
                    p(8, Integer),
                    p(8, Integer),
                    p(8, Integer),
                    p(1, Integer),
                    p(4, Float)
                ]
            ),
        ]
    );
    let llvm = entries(include_str!("../../../tests/ptx/llvm_nvptx.ptx"));
    assert_eq!(
        llvm,
        [(
            "matmul_kernel".to_string(),
            vec![
                p(8, Pointer),
                p(8, Pointer),
                p(8, Pointer),
                p(4, Integer),
                p(4, Integer),
                p(4, Integer)
            ]
        )]
    );
    let open64 = entries(include_str!("../../../tests/ptx/open64_cuda4.ptx"));
    assert_eq!(
        open64,
        [
            ("_Z8myKernelPi".to_string(), vec![p(8, Integer)]),
            (
                "_Z5scalePfif".to_string(),
                vec![p(8, Integer), p(4, Integer), p(4, Float)]
            ),
        ]
    );
    let nvrtc = entries(include_str!("../../../tests/ptx/nvrtc_cluster.ptx"));
    assert_eq!(
        nvrtc,
        [(
            "cluster_fill".to_string(),
            vec![p(16, Any), p(8, Integer), p(4, Integer)]
        )]
    );
}

/// Every PTX module of this workspace (raw strings holding a `.entry`, given a header where they
/// have none): each of its kernels is read.
#[test]
fn every_ptx_module_of_the_workspace() {
    // Read from the workspace at run time: the packaged crate has none of these files, and its
    // tests skip this one.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let paths = [
        "tests/src/kernels.rs",
        "tests/src/saxpy.rs",
        "tests/tests/typed_kernels.rs",
        "tests/bench/src/kernel.rs",
        "tests/interop/src/work.rs",
        "tests/examples/contexts/ops.rs",
        "cuda-stream/examples/streams.rs",
        "tests/mock-driver/tests/checked_launches.rs",
    ];
    if !root.join(paths[0]).is_file() {
        println!("skipped: not in the workspace (a packaged crate): its PTX is not here");
        return;
    }
    let texts: Vec<(&str, String)> = paths
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
            (*f, text)
        })
        .collect();
    let sources: Vec<(&str, &str)> = texts.iter().map(|(f, t)| (*f, t.as_str())).collect();
    let mut kernels = 0;
    for (file, source) in sources {
        let mut rest = source;
        let mut found = 0;
        while let Some(start) = rest.find("r#\"") {
            let body = &rest[start + 3..];
            let end = body.find("\"#").expect("a raw string ends");
            let ptx = &body[..end];
            rest = &body[end..];
            if !ptx.contains(".entry") {
                continue;
            }
            let text = if ptx.contains(".version") {
                ptx.to_string()
            } else {
                format!("{HEADER}{ptx}")
            };
            // The names a plain text search finds after each `.entry`.
            let declared: Vec<&str> = text
                .split(".entry")
                .skip(1)
                .map(|s| {
                    let s = s.trim_start();
                    &s[..s
                        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .unwrap_or(0)]
                })
                .collect();
            let read = entries(&text);
            assert_eq!(names(&read), declared, "{file}");
            found += read.len();
        }
        assert!(found > 0, "{file}: no kernel found");
        kernels += found;
    }
    assert!(kernels >= 15, "{kernels}");
    // Spot checks against the declarations.
    let saxpy_source = &texts[1].1;
    let saxpy_ptx = saxpy_source
        .split("r#\"")
        .nth(1)
        .unwrap()
        .split("\"#")
        .next()
        .unwrap();
    let saxpy = entries(saxpy_ptx);
    assert_eq!(
        saxpy[0],
        (
            "saxpy".to_string(),
            vec![p(4, Integer), p(4, Float), p(8, Integer), p(8, Integer)]
        )
    );
}

//! The parameter lists of the `.entry` kernels of PTX text, read when a module is loaded from
//! PTX: what a launch checks its arguments against where the driver cannot say
//! (`cuFuncGetParamInfo` is CUDA 12.4), and the kinds (integer, float, pointer) it never says.

use crate::base::params::{ParamInfo, ParamKind};

/// The text without `//` and `/* */` comments.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = &rest[l..];
                rest = rest.find('\n').map_or("", |n| &rest[n..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b + 2..]
                    .find("*/")
                    .map_or("", |e| &rest[b + 2 + e + 2..]);
                out.push(' ');
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// The size and kind of one PTX scalar type (`.u32`, `.f16x2`, `.b8`, `.pred`).
fn scalar(ty: &str) -> Option<(u32, ParamKind)> {
    let (kind, bits) = match ty.as_bytes().first()? {
        b'u' | b's' => (ParamKind::Integer, &ty[1..]),
        b'f' => (ParamKind::Float, &ty[1..]),
        b'b' if ty.starts_with("bf16") => (ParamKind::Float, &ty[2..]),
        b'b' => (ParamKind::Any, &ty[1..]),
        _ => return None,
    };
    let (bits, lanes) = match bits.split_once('x') {
        Some((b, n)) => (b, n.parse::<u32>().ok()?),
        None => (bits, 1),
    };
    let bits: u32 = bits.parse().ok()?;
    (bits % 8 == 0 && bits > 0).then_some((bits / 8 * lanes, kind))
}

/// One `.param` declaration: `.param [.align N] .TYPE [.ptr [.SPACE] [.align N]] name[[N]]`.
fn param(decl: &str) -> Option<ParamInfo> {
    let mut tokens = decl.split_whitespace().peekable();
    if tokens.next()? != ".param" {
        return None;
    }
    let mut ty = None;
    let mut pointer = false;
    let mut name = "";
    while let Some(t) = tokens.next() {
        match t {
            ".align" => {
                tokens.next()?;
            }
            ".ptr" => pointer = true,
            t if t.starts_with('.') && ty.is_none() => ty = Some(scalar(&t[1..])?),
            t if t.starts_with('.') => {} // the pointer's state space
            t => name = t,
        }
    }
    let (size, kind) = ty?;
    // `name[N]`, possibly written `name [N]`, or `name[]` (not a kernel parameter).
    let joined: String = std::iter::once(name).chain(tokens).collect();
    let count = match joined.split_once('[') {
        Some((_, n)) => n.trim_end_matches(']').trim().parse::<u32>().ok()?,
        None => 1,
    };
    let kind = match (pointer, count) {
        (true, 1) => ParamKind::Pointer,
        (false, 1) => kind,
        _ => ParamKind::Any,
    };
    Some(ParamInfo {
        size: size.checked_mul(count)?,
        kind,
    })
}

/// Every `.entry` of `text` with its parameters; an entry whose list cannot be read is left out
/// (its launches are checked by the driver's account, or not at all).
pub(crate) fn entries(text: &str) -> Vec<(String, Vec<ParamInfo>)> {
    let clean = without_comments(text);
    let mut out = Vec::new();
    let mut rest = clean.as_str();
    while let Some(i) = rest.find(".entry") {
        let before_ok = i == 0 || rest.as_bytes()[i - 1].is_ascii_whitespace();
        rest = &rest[i + ".entry".len()..];
        if !before_ok || !rest.starts_with(|c: char| c.is_ascii_whitespace()) {
            continue;
        }
        let after = rest.trim_start();
        let len = after
            .find(|c: char| !(c.is_alphanumeric() || "_$.".contains(c)))
            .unwrap_or(after.len());
        let name = &after[..len];
        let tail = after[len..].trim_start();
        let params = match tail.strip_prefix('(') {
            Some(list) => {
                let Some(close) = list.find(')') else { break };
                list[..close]
                    .split(',')
                    .filter(|d| !d.trim().is_empty())
                    .map(param)
                    .collect::<Option<Vec<_>>>()
            }
            None => Some(Vec::new()),
        };
        if let (false, Some(params)) = (name.is_empty(), params) {
            out.push((name.to_string(), params));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(size: u32, kind: ParamKind) -> ParamInfo {
        ParamInfo { size, kind }
    }

    #[test]
    fn reads_entries_and_their_parameters() {
        let text = ".version 7.8\n.target sm_90\n// .entry commented(.param .u32 x)\n\
            .visible .entry a(\n .param .u64 a_0, // the pointer\n .param .f32 a_1 /* , .param .u8 z */\n)\n{ ret; }\n\
            .entry b\n{ ret; }\n\
            .visible .entry c(.param .align 8 .b8 c_0[24], .param .f64 c_1, .param .u64 .ptr .global .align 4 c_2, .param .s16 c_3, .param .b32 c_4, .param .f16x2 c_5)\n\
            .maxntid 64\n{ ret; }\n\
            .visible .entry _Z6kernelPfi(\n\t.param .u64 _Z6kernelPfi_param_0,\n\t.param .u32 _Z6kernelPfi_param_1\n)\n{ ret; }\n";
        let e = entries(text);
        assert_eq!(
            e,
            vec![
                (
                    "a".to_string(),
                    vec![p(8, ParamKind::Integer), p(4, ParamKind::Float)]
                ),
                ("b".to_string(), vec![]),
                (
                    "c".to_string(),
                    vec![
                        p(24, ParamKind::Any),
                        p(8, ParamKind::Float),
                        p(8, ParamKind::Pointer),
                        p(2, ParamKind::Integer),
                        p(4, ParamKind::Any),
                        p(4, ParamKind::Float),
                    ]
                ),
                (
                    "_Z6kernelPfi".to_string(),
                    vec![p(8, ParamKind::Integer), p(4, ParamKind::Integer)]
                ),
            ]
        );
    }

    #[test]
    fn leaves_out_what_it_cannot_read() {
        assert!(entries(".version 7.0\n.target sm_50\n").is_empty());
        assert!(entries(".entry a(.param x) {}").is_empty());
        assert!(entries(".entry a(.param .q32 x) {}").is_empty());
        assert_eq!(entries(".entry a(.param .u32 x) {}").len(), 1);
        assert!(entries("x.entry a(.param .u32 x) {}").is_empty());
    }
}

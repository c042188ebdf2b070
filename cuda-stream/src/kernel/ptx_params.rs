//! The parameter lists of the `.entry` kernels of PTX text, read when a module is loaded from
//! PTX: what a launch checks its arguments against where the driver cannot say
//! (`cuFuncGetParamInfo` is CUDA 12.4), and the kinds (integer, float, pointer) it never says.
//!
//! The text is read as the PTX ISA defines it (section 4, "Syntax"; 5.1.6, "Kernel Function
//! Parameters"; 11.2.1, ".entry"): tokens separated by any whitespace or none, where the
//! grammar allows (`.visible.entry`, `.ptr.global.align 16`), `//` and `/* */` comments
//! anywhere, strings (`.file 1 "a.cu"`) skipped whole, integers in decimal, hex, octal or binary.
//! A kernel's list is read only when every declaration in it is understood: `.param`, an
//! optional `.align N`, an optional `.v2` / `.v4`, one of the fundamental types a parameter may
//! have, an optional `.ptr` with its state space and alignment, the name, and array dimensions
//! of integer literals. Anything else (`.texref` and other opaque types, a constant expression
//! for a dimension, an attribute this reader does not know) leaves that kernel out: unknown,
//! never guessed. Text that may need the C preprocessor (a `#` directive, or a `\` line
//! continuation anywhere: the ISA lets `cpp` process PTX, so any token may be a macro, and a
//! comment ending in `\` swallows the next line), text older than PTX ISA 1.4 (whose parameters
//! were declared inside the kernel body), or text that does not tokenize leaves every kernel
//! out.

use std::collections::HashMap;

use crate::base::params::{ParamInfo, ParamKind};

/// One token of PTX text (comments and whitespace dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    /// `.entry`, `.u32`, `.align`: a directive or type name, without its dot.
    Directive(&'a str),
    /// A name: `saxpy`, `%r1`, `$L__BB0_2`, `_Z6kernelPfi`.
    Ident(&'a str),
    /// A number as written: `16`, `0x10`, `7.8`, `0f3F800000`.
    Number(&'a str),
    /// A string literal (its contents are never needed).
    Str,
    /// Any other single character: `(`, `)`, `,`, `[`, `]`, `{`, `}`, `;`, ...
    Punct(u8),
}

/// Text this reader cannot take at its word: every kernel's parameters are unknown.
#[derive(Debug)]
struct Unreadable;

/// `[a-zA-Z0-9_$]`: what may follow the first character of a PTX identifier.
fn follows(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$'
}

/// The tokens of PTX text, one at a time.
struct Lexer<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Lexer<'a> {
    fn new(text: &'a str) -> Lexer<'a> {
        Lexer { text, at: 0 }
    }

    /// The end of the run of bytes from `from` for which `keep` holds.
    fn run(&self, from: usize, keep: impl Fn(u8) -> bool) -> usize {
        let b = self.text.as_bytes();
        let mut end = from;
        while end < b.len() && keep(b[end]) {
            end += 1;
        }
        end
    }

    fn next_token(&mut self) -> Result<Option<Tok<'a>>, Unreadable> {
        let b = self.text.as_bytes();
        loop {
            let i = self.run(self.at, |c| c.is_ascii_whitespace());
            self.at = i;
            let Some(&c) = b.get(i) else {
                return Ok(None);
            };
            let next = b.get(i + 1).copied();
            let (tok, end) = match c {
                b'/' if next == Some(b'/') => {
                    self.at = self.run(i, |c| c != b'\n');
                    continue;
                }
                b'/' if next == Some(b'*') => {
                    let close = self.text[i + 2..].find("*/").ok_or(Unreadable)?;
                    self.at = i + 2 + close + 2;
                    continue;
                }
                b'"' => {
                    let mut j = i + 1;
                    loop {
                        match b.get(j) {
                            None => return Err(Unreadable),
                            Some(b'\\') => j += 2,
                            Some(b'"') => break,
                            Some(_) => j += 1,
                        }
                    }
                    (Tok::Str, j + 1)
                }
                b'.' if next.is_some_and(follows) => {
                    let end = self.run(i + 1, follows);
                    (Tok::Directive(&self.text[i + 1..end]), end)
                }
                c if c.is_ascii_digit() => {
                    let end = self.run(i, |c| follows(c) || c == b'.');
                    (Tok::Number(&self.text[i..end]), end)
                }
                c if c.is_ascii_alphabetic() => {
                    let end = self.run(i, follows);
                    (Tok::Ident(&self.text[i..end]), end)
                }
                b'_' | b'$' | b'%' if next.is_some_and(follows) => {
                    let end = self.run(i + 1, follows);
                    (Tok::Ident(&self.text[i..end]), end)
                }
                // A preprocessor directive or a line continuation: cpp's business, not ours.
                b'#' | b'\\' => return Err(Unreadable),
                c if c.is_ascii() => (Tok::Punct(c), i + 1),
                _ => return Err(Unreadable),
            };
            self.at = end;
            return Ok(Some(tok));
        }
    }
}

/// A PTX integer literal (ISA 4.5.1, as in C): `16`, `0x10`, `020` (octal), `0b10000`, each
/// with an optional `U` suffix.
fn int_literal(t: &str) -> Option<u64> {
    let t = t.strip_suffix('U').unwrap_or(t);
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or(t.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = t.strip_prefix("0b").or(t.strip_prefix("0B")) {
        (b, 2)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t, 10)
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// The size and kind of a fundamental type a kernel parameter may have (ISA 5.2.1); `None`
/// for anything else (`.pred`, which lives only in registers, the opaque `.texref`,
/// `.samplerref` and `.surfref`, the alternate float formats, which are instruction types).
fn fundamental(ty: &str) -> Option<(u32, ParamKind)> {
    use ParamKind::{Any, Float, Integer};
    Some(match ty {
        "u8" | "s8" => (1, Integer),
        "u16" | "s16" => (2, Integer),
        "u32" | "s32" => (4, Integer),
        "u64" | "s64" => (8, Integer),
        "b8" => (1, Any),
        "b16" => (2, Any),
        "b32" => (4, Any),
        "b64" => (8, Any),
        "b128" => (16, Any),
        "f16" | "bf16" => (2, Float),
        "f32" | "f16x2" | "bf16x2" => (4, Float),
        "f64" => (8, Float),
        _ => return None,
    })
}

/// One declaration of a kernel's parameter list (ISA 5.1.6.1 and 5.1.6.3):
/// `.param [.align N] [.v2|.v4] .TYPE [.ptr [.SPACE] [.align N]] name[dim]...`.
fn param(decl: &[Tok<'_>]) -> Option<ParamInfo> {
    let mut tokens = decl.iter().copied();
    if tokens.next()? != Tok::Directive("param") {
        return None;
    }
    let mut lanes = 1u64;
    let mut ty = None;
    let mut pointer = false;
    let mut space = false;
    let mut name = false;
    let mut elements = 1u64;
    let mut dims = false;
    while let Some(t) = tokens.next() {
        match t {
            Tok::Directive("align") if !name => {
                let Some(Tok::Number(n)) = tokens.next() else {
                    return None;
                };
                int_literal(n)?;
            }
            Tok::Directive(v @ ("v2" | "v4")) if ty.is_none() && lanes == 1 => {
                lanes = if v == "v2" { 2 } else { 4 };
            }
            Tok::Directive(t) if ty.is_none() => ty = Some(fundamental(t)?),
            Tok::Directive("ptr") if ty.is_some() && !pointer && !name => pointer = true,
            Tok::Directive("const" | "global" | "local" | "shared")
                if pointer && !space && !name =>
            {
                space = true
            }
            Tok::Ident(_) if ty.is_some() && !name => name = true,
            Tok::Punct(b'[') if name => {
                let Some(Tok::Number(n)) = tokens.next() else {
                    return None;
                };
                if tokens.next()? != Tok::Punct(b']') {
                    return None;
                }
                elements = elements.checked_mul(int_literal(n)?)?;
                dims = true;
            }
            _ => return None,
        }
    }
    let (size, kind) = ty?;
    if !name {
        return None;
    }
    let kind = match (pointer, lanes > 1 || dims) {
        (false, false) => kind,
        (false, true) => ParamKind::Any,
        // A pointer is an integer of the address size (`.u64`, or `.u32` for 32-bit code).
        (true, false) if kind != ParamKind::Float => ParamKind::Pointer,
        (true, _) => return None,
    };
    let bytes = u64::from(size).checked_mul(lanes)?.checked_mul(elements)?;
    let size = u32::try_from(bytes).ok().filter(|&s| s > 0)?;
    Some(ParamInfo { size, kind })
}

/// The parameters of a `.entry` whose header is `header` (the tokens after the kernel's name,
/// up to its body or the `;` of a declaration); `None` where they cannot be read.
fn entry_params(header: &[Tok<'_>]) -> Option<Vec<ParamInfo>> {
    let Some((Tok::Punct(b'('), rest)) = header.split_first() else {
        // No list: no parameters, unless a list comes later (after a directive this reader
        // does not expect there).
        return (!header.contains(&Tok::Punct(b'('))).then(Vec::new);
    };
    let close = rest.iter().position(|t| *t == Tok::Punct(b')'))?;
    let list = &rest[..close];
    // Performance directives (`.maxntid 128, 1, 1`, `.reqntid`, `.minnctapersm`, ...) may
    // follow; a second list may not.
    if list.contains(&Tok::Punct(b'(')) || rest[close + 1..].contains(&Tok::Punct(b'(')) {
        return None;
    }
    if list.is_empty() {
        return Some(Vec::new());
    }
    list.split(|t| *t == Tok::Punct(b',')).map(param).collect()
}

/// The `.version` of the text, as `(major, minor)`.
fn version(text: &str) -> Result<(u32, u32), Unreadable> {
    let mut lexer = Lexer::new(text);
    while let Some(t) = lexer.next_token()? {
        if t == Tok::Directive("version") {
            let Some(Tok::Number(v)) = lexer.next_token()? else {
                return Err(Unreadable);
            };
            let (major, minor) = v.split_once('.').ok_or(Unreadable)?;
            return Ok((
                major.parse().map_err(|_| Unreadable)?,
                minor.parse().map_err(|_| Unreadable)?,
            ));
        }
    }
    Err(Unreadable)
}

/// A kernel's name and its parameters, where they can be read.
type Entry<'a> = (&'a str, Option<Vec<ParamInfo>>);

/// Every `.entry` of `text` at the top level, with its parameters where they can be read.
fn read(text: &str) -> Result<Vec<Entry<'_>>, Unreadable> {
    // A backslash before a line's end splices lines for the preprocessor, in comments and
    // strings too (a `//` comment ending in one swallows the next line).
    if text.contains("\\\n") || text.contains("\\\r\n") || version(text)? < (1, 4) {
        return Err(Unreadable);
    }
    let mut lexer = Lexer::new(text);
    let mut out = Vec::new();
    let mut depth = 0usize;
    while let Some(t) = lexer.next_token()? {
        match t {
            Tok::Punct(b'{') => depth += 1,
            Tok::Punct(b'}') => depth = depth.checked_sub(1).ok_or(Unreadable)?,
            Tok::Directive("entry") if depth == 0 => {
                let Some(Tok::Ident(name)) = lexer.next_token()? else {
                    return Err(Unreadable);
                };
                let mut header = Vec::new();
                loop {
                    match lexer.next_token()?.ok_or(Unreadable)? {
                        Tok::Punct(b'{') => {
                            depth += 1;
                            break;
                        }
                        Tok::Punct(b';') => break,
                        t => header.push(t),
                    }
                }
                out.push((name, entry_params(&header)));
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Every `.entry` of `text` whose parameters could be read, with them, in the order of the
/// text. A kernel left out is unknown: its launches are checked by the driver's account
/// (`cuFuncGetParamInfo`), or not at all. A kernel declared twice with different lists is left
/// out too.
pub(crate) fn entries(text: &str) -> Vec<(String, Vec<ParamInfo>)> {
    let Ok(found) = read(text) else {
        return Vec::new();
    };
    // Each name's first list, and whether every declaration of it agrees.
    let mut first: HashMap<&str, (&Option<Vec<ParamInfo>>, bool)> = HashMap::new();
    for (name, params) in &found {
        first
            .entry(name)
            .and_modify(|(p, agree)| *agree &= *p == params)
            .or_insert((params, true));
    }
    found
        .iter()
        .filter_map(|(name, _)| {
            let (params, agree) = first.remove(name)?;
            Some((name.to_string(), params.clone().filter(|_| agree)?))
        })
        .collect()
}

#[cfg(test)]
mod tests;

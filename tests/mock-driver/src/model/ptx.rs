//! The mock's reading of PTX text: each `.entry NAME(...)` is a kernel, with its parameters'
//! sizes (`.u32` 4, `.u64` 8, `.b8 x[16]` 16, `.b8 x[0x10]` 16, `.v2 .f32` 8, ...) and an
//! optional `.maxntid X, Y, Z`; `//` and `/* */` comments are skipped. Lenient where the real
//! JIT compiler is strict: it looks for what it needs (`.version`, `.target`, the kernels) and
//! ignores the rest.

/// A kernel as the PTX declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) name: String,
    /// Each parameter's size in bytes.
    pub(crate) params: Vec<usize>,
    /// From `.maxntid`, the product of its dimensions.
    pub(crate) max_threads: Option<u32>,
}

/// The size of a PTX scalar type (`.u32`, `.f64`, `.b8`, `.pred`, ...).
fn type_size(t: &str) -> Option<usize> {
    Some(match t {
        ".u8" | ".s8" | ".b8" => 1,
        ".u16" | ".s16" | ".b16" | ".f16" | ".bf16" => 2,
        ".u32" | ".s32" | ".b32" | ".f32" | ".f16x2" | ".bf16x2" | ".pred" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        ".b128" => 16,
        _ => return None,
    })
}

/// A PTX integer literal, as C writes it: `16`, `0x10`, `020` (octal), `0b10000`, with an
/// optional `U` suffix.
fn int_literal(t: &str) -> Option<usize> {
    let t = t.trim().trim_end_matches('U');
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or(t.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = t.strip_prefix("0b").or(t.strip_prefix("0B")) {
        (b, 2)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t, 10)
    };
    usize::from_str_radix(digits, radix).ok()
}

/// One `.param` declaration's size: `.param .u64 name`, `.param .u64 .ptr .global .align 8 p`,
/// `.param .align 8 .b8 name[16]`, `.param .v2 .f32 v`, `.param .b8 m[2][0x8]`.
fn param_size(decl: &str) -> Result<usize, String> {
    // `.ptr.global.align 8` may be written without spaces.
    let spaced = decl.replace('.', " .");
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let size = tokens
        .iter()
        .find_map(|t| type_size(t))
        .ok_or_else(|| format!("parameter `{}` has no type", decl.trim()))?;
    let lanes = match tokens.iter().find(|t| t.starts_with(".v")) {
        Some(&".v2") => 2,
        Some(&".v4") => 4,
        Some(v) => return Err(format!("parameter `{}`: vector {v}", decl.trim())),
        None => 1,
    };
    let name = &decl[decl.rfind(|c: char| c.is_whitespace()).map_or(0, |i| i + 1)..];
    let mut count = 1;
    let mut dims = decl;
    while let Some(a) = dims.find('[') {
        let b = dims[a..]
            .find(']')
            .ok_or_else(|| format!("parameter `{name}`: unclosed array length"))?;
        count *= int_literal(&dims[a + 1..a + b])
            .ok_or_else(|| format!("parameter `{name}`: bad array length"))?;
        dims = &dims[a + b..];
    }
    Ok(size * lanes * count)
}

/// The text without its `/* */` and `//` comments.
fn strip_comments(text: &str) -> String {
    let mut unblocked = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("/*") {
        unblocked.push_str(&rest[..i]);
        unblocked.push(' ');
        rest = rest[i + 2..]
            .find("*/")
            .map_or("", |e| &rest[i + 2 + e + 2..]);
    }
    unblocked.push_str(rest);
    let mut clean = String::with_capacity(text.len());
    for line in unblocked.lines() {
        clean.push_str(line.split("//").next().unwrap_or(""));
        clean.push('\n');
    }
    clean
}

/// The module-scope variables of PTX text, in `.global` or `.const` memory (what
/// `cuModuleGetGlobal` finds): each name with its size in bytes (`.global .u32 n;` 4,
/// `.const .align 4 .b8 table[64];` 64, `.global .f32 v[2][8] = {...};` 64). Declarations inside
/// a kernel's body are not module-scope and are skipped, as are externs (`.extern`) and
/// declarations whose size cannot be read.
pub(crate) fn parse_globals(text: &str) -> Vec<(String, usize)> {
    let clean = strip_comments(text);
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut statement = String::new();
    for c in clean.chars() {
        match c {
            '{' => {
                // An initialiser's braces belong to its statement (after `=`).
                if depth == 0 && statement.contains('=') {
                    statement.push(c);
                    continue;
                }
                depth += 1;
                statement.clear();
            }
            '}' => {
                if depth == 0 {
                    statement.push(c);
                } else {
                    depth -= 1;
                    statement.clear();
                }
            }
            ';' if depth == 0 => {
                // The module's directives (`.version`, `.target`, `.address_size`) end at their
                // line, not at a `;`.
                let decl: String = statement
                    .split('=')
                    .next()
                    .unwrap_or("")
                    .lines()
                    .filter(|l| {
                        let l = l.trim_start();
                        !(l.starts_with(".version")
                            || l.starts_with(".target")
                            || l.starts_with(".address_size"))
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                statement.clear();
                let spaced = decl.replace('.', " .");
                let tokens: Vec<&str> = spaced.split_whitespace().collect();
                let space = tokens.iter().any(|t| *t == ".global" || *t == ".const");
                if !space || tokens.contains(&".extern") || tokens.contains(&".entry") {
                    continue;
                }
                // Linkage (`.visible`, `.weak`, `.common`) is no part of the size (and `.visible`
                // would read as a vector).
                let decl: String = decl
                    .split_whitespace()
                    .filter(|t| ![".visible", ".weak", ".common"].contains(t))
                    .collect::<Vec<_>>()
                    .join(" ");
                let Ok(size) = param_size(&decl) else {
                    continue;
                };
                let head = decl.split('[').next().unwrap_or("");
                let name = head
                    .rsplit(|c: char| c.is_whitespace())
                    .next()
                    .unwrap_or("");
                if !name.is_empty() && !name.starts_with('.') {
                    out.push((name.to_string(), size));
                }
            }
            _ if depth == 0 => statement.push(c),
            _ => {}
        }
    }
    out
}

/// The kernels of PTX text and its `.target` architecture (`sm_50` as 50), or a `ptxas`-style
/// error message.
pub(crate) fn parse_ptx(text: &str) -> Result<(Vec<Entry>, i32), String> {
    let clean = strip_comments(text);
    let version = clean
        .split_whitespace()
        .skip_while(|t| *t != ".version")
        .nth(1)
        .ok_or("ptxas fatal   : no .version directive (cuda-mock-driver)")?;
    let (major, minor) = version.split_once('.').unwrap_or((version, "0"));
    if major.parse::<u32>().is_err() || minor.parse::<u32>().is_err() {
        return Err(format!(
            "ptxas fatal   : bad .version `{version}` (cuda-mock-driver)"
        ));
    }
    let target = clean
        .split_whitespace()
        .skip_while(|t| *t != ".target")
        .nth(1)
        .ok_or("ptxas fatal   : no .target directive (cuda-mock-driver)")?;
    let ptx_version = target
        .trim_end_matches(',')
        .strip_prefix("sm_")
        .and_then(|a| a.trim_end_matches(char::is_alphabetic).parse::<i32>().ok())
        .ok_or_else(|| format!("ptxas fatal   : unknown .target `{target}` (cuda-mock-driver)"))?;
    let mut entries: Vec<Entry> = Vec::new();
    let mut rest = clean.as_str();
    while let Some(i) = rest.find(".entry") {
        rest = rest[i + ".entry".len()..].trim_start();
        let name_len = rest
            .find(|c: char| !(c.is_alphanumeric() || "_$".contains(c)))
            .unwrap_or(rest.len());
        let name = rest[..name_len].to_string();
        if name.is_empty() {
            return Err("ptxas error   : a .entry without a name (cuda-mock-driver)".into());
        }
        let mut params = Vec::new();
        let mut after = rest[name_len..].trim_start();
        if let Some(list) = after.strip_prefix('(') {
            let close = list
                .find(')')
                .ok_or_else(|| format!("ptxas error   : `{name}`: unclosed parameter list"))?;
            for decl in list[..close].split(',').filter(|d| !d.trim().is_empty()) {
                params
                    .push(param_size(decl).map_err(|e| format!("ptxas error   : `{name}`: {e}"))?);
            }
            after = &list[close + 1..];
        }
        let header = &after[..after.find('{').unwrap_or(after.len())];
        let max_threads = match header.find(".maxntid") {
            Some(m) => {
                let dims = header[m + ".maxntid".len()..]
                    .split(',')
                    .map(|d| d.trim().parse::<u32>())
                    .collect::<Result<Vec<u32>, _>>()
                    .map_err(|_| format!("ptxas error   : `{name}`: bad .maxntid"))?;
                Some(dims.iter().product())
            }
            None => None,
        };
        if entries.iter().any(|e| e.name == name) {
            return Err(format!("ptxas error   : duplicate kernel `{name}`"));
        }
        entries.push(Entry {
            name,
            params,
            max_threads,
        });
    }
    if entries.is_empty() {
        return Err(
            "ptxas fatal   : the module defines no kernel (.entry) (cuda-mock-driver)".into(),
        );
    }
    Ok((entries, ptx_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_module_scope_globals_and_constants() {
        let text = ".version 7.8\n.target sm_90\n.address_size 64\n\
             .visible .const .align 4 .b8 coeffs[64];\n\
             .visible .global .align 4 .u32 counter; // one word\n\
             .global .f32 table[2][8] = {1.0, 2.0};\n\
             .extern .global .u32 elsewhere;\n\
             .visible .entry k(.param .u64 p)\n{ .reg .b32 %r<2>; .shared .u32 s; ret; }\n";
        assert_eq!(
            parse_globals(text),
            vec![
                ("coeffs".to_string(), 64),
                ("counter".to_string(), 4),
                ("table".to_string(), 64)
            ]
        );
    }

    #[test]
    fn parses_entries_params_and_maxntid() {
        let (entries, version) = parse_ptx(
            ".version 7.8\n.target sm_90a\n// .entry commented(\n\
             .visible .entry a(\n .param .u64 a_0, // the pointer\n .param .u32 a_1\n)\n{ ret; }\n\
             .entry b .maxntid 128, 2, 1\n{ ret; }\n\
             .visible .entry c(.param .align 8 .b8 c_0[24], .param .f64 c_1, .param .u64 .ptr .global .align 4 c_2)\n\
             .maxntid 64\n{ ret; }\n",
        )
        .unwrap();
        assert_eq!(version, 90);
        assert_eq!(
            entries,
            vec![
                Entry {
                    name: "a".into(),
                    params: vec![8, 4],
                    max_threads: None
                },
                Entry {
                    name: "b".into(),
                    params: vec![],
                    max_threads: Some(256)
                },
                Entry {
                    name: "c".into(),
                    params: vec![24, 8, 8],
                    max_threads: Some(64)
                },
            ]
        );
    }

    #[test]
    fn reads_the_integer_forms_vectors_arrays_and_comments_of_the_isa() {
        let (entries, _) = parse_ptx(
            ".version 8.0\n.target sm_80\n/* .entry hidden(.param .u32 h) */\n\
             .visible.entry k(.param .align 16 .b8 k_0[0x10], .param .b8 k_1[010], \
             .param .u8 k_2[0b11], .param .b8 k_3[2][3U], .param .v4 .f32 k_4, \
             .param .u64 .ptr.global.align 16 k_5 /* , .param .u8 z */)\n{ ret; }\n",
        )
        .unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].name, "k");
        assert_eq!(entries[0].params, vec![16, 8, 3, 6, 16, 8]);
    }

    #[test]
    fn refuses_text_without_kernels() {
        assert!(
            parse_ptx(".version 7.0\n.target sm_50\n")
                .unwrap_err()
                .contains(".entry")
        );
        assert!(
            parse_ptx(".entry a() { ret; }")
                .unwrap_err()
                .contains(".version")
        );
        assert!(
            parse_ptx(".version 7.0\n.entry a() {}")
                .unwrap_err()
                .contains(".target")
        );
        assert!(parse_ptx(".version 7.0\n.target sm_50\n.entry a(.param x) {}").is_err());
    }
}

//! PTX text as the mock reads it: each `.entry NAME(...)` is a kernel, with its parameters'
//! sizes (`.u32` 4, `.u64` 8, `.b8 x[16]` 16, ...) and an optional `.maxntid X, Y, Z`; the
//! `.target` architecture. The PTX is never executed.

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
        ".u32" | ".s32" | ".b32" | ".f32" | ".pred" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        _ => return None,
    })
}

/// One `.param` declaration's size: `.param .u64 name`, `.param .u64 .ptr .global .align 8 p`,
/// `.param .align 8 .b8 name[16]`.
fn param_size(decl: &str) -> Result<usize, String> {
    let tokens: Vec<&str> = decl.split_whitespace().collect();
    let size = tokens
        .iter()
        .find_map(|t| type_size(t))
        .ok_or_else(|| format!("parameter `{}` has no type", decl.trim()))?;
    let name = tokens.last().copied().unwrap_or_default();
    let count = match (name.find('['), name.find(']')) {
        (Some(a), Some(b)) if b > a => name[a + 1..b]
            .trim()
            .parse::<usize>()
            .map_err(|_| format!("parameter `{name}`: bad array length"))?,
        _ => 1,
    };
    Ok(size * count)
}

/// The kernels of PTX text and its `.target` architecture (`sm_50` as 50), or a `ptxas`-style
/// error message.
pub(crate) fn parse_ptx(text: &str) -> Result<(Vec<Entry>, i32), String> {
    // Comments out.
    let mut clean = String::with_capacity(text.len());
    for line in text.lines() {
        clean.push_str(line.split("//").next().unwrap_or(""));
        clean.push('\n');
    }
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

//! Running bindgen on the pinned headers (its configuration), and reading items out of its
//! output: names, type aliases, `CUresult` constants, token text.

use std::collections::HashMap;
use std::path::Path;

use crate::Result;

/// The style every generated file shares (new-type enums, derives, `core` types, extern blocks
/// merged, layout tests, no formatter), on `builder`'s header and allow-lists; the driver's
/// bindings keep the header's comments.
pub(crate) fn styled(builder: bindgen::Builder, comments: bool) -> bindgen::Builder {
    builder
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .use_core()
        .ctypes_prefix("::core::ffi")
        .generate_comments(comments)
        .merge_extern_blocks(true)
        .layout_tests(true)
        .formatter(bindgen::Formatter::None)
}

pub(crate) fn run_bindgen(header: &Path, clang_args: &[&str], typedefs: bool) -> Result<syn::File> {
    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_args(clang_args)
        .allowlist_function("cu.*")
        .allowlist_type("(CU|cu).*")
        .allowlist_var("CU.*");
    if typedefs {
        builder = builder.allowlist_type("PFN_cu.*");
    }
    let bindings = styled(builder, true)
        .generate()
        .map_err(|e| format!("bindgen: {e}"))?;
    syn::parse_str(&bindings.to_string()).map_err(|e| format!("parsing bindgen output: {e}"))
}

pub(crate) fn tokens<T: quote::ToTokens>(t: &T) -> String {
    let s = t.to_token_stream().to_string();
    // Tidy the token spacing of types such as `* mut :: core :: ffi :: c_void`.
    s.replace(" :: ", "::")
        .replace(":: ", "::")
        .replace("* mut ", "*mut ")
        .replace("* const ", "*const ")
        .replace(" ,", ",")
        .replace("[ ", "[")
        .replace(" ]", "]")
        .replace(" ;", ";")
        .replace("< ", "<")
        .replace(" >", ">")
        .replace("Option <", "Option<")
        .replace("unsafe extern \"C\" fn (", "unsafe extern \"C\" fn(")
}

/// The name an item defines, if it defines one.
pub(crate) fn item_name(item: &syn::Item) -> Option<String> {
    match item {
        syn::Item::Struct(s) => Some(s.ident.to_string()),
        syn::Item::Union(u) => Some(u.ident.to_string()),
        syn::Item::Enum(e) => Some(e.ident.to_string()),
        syn::Item::Type(t) => Some(t.ident.to_string()),
        syn::Item::Const(c) if c.ident != "_" => Some(c.ident.to_string()),
        _ => None,
    }
}

/// `type A = B;` items: A -> B's tokens.
pub(crate) fn collect_type_aliases(items: &[syn::Item]) -> HashMap<String, String> {
    items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Type(t) => Some((t.ident.to_string(), tokens(&t.ty))),
            _ => None,
        })
        .collect()
}

/// Removes doc attributes (bindgen copies the header's comments, which are not valid rustdoc).
pub(crate) fn strip_docs(item: &mut syn::Item) {
    fn strip(attrs: &mut Vec<syn::Attribute>) {
        attrs.retain(|a| !a.path().is_ident("doc"));
    }
    match item {
        syn::Item::Struct(s) => {
            strip(&mut s.attrs);
            for f in s.fields.iter_mut() {
                strip(&mut f.attrs);
            }
        }
        syn::Item::Union(u) => {
            strip(&mut u.attrs);
            for f in u.fields.named.iter_mut() {
                strip(&mut f.attrs);
            }
        }
        syn::Item::Enum(e) => strip(&mut e.attrs),
        syn::Item::Type(t) => strip(&mut t.attrs),
        syn::Item::Const(c) => strip(&mut c.attrs),
        syn::Item::Impl(i) => {
            strip(&mut i.attrs);
            for ii in i.items.iter_mut() {
                if let syn::ImplItem::Const(c) = ii {
                    strip(&mut c.attrs);
                }
            }
        }
        _ => {}
    }
}

/// Collects `(name, value, description)` for every `CUresult` constant.
pub(crate) fn collect_results(item: &syn::Item, out: &mut Vec<(String, u32, String)>) {
    let syn::Item::Impl(imp) = item else { return };
    if tokens(&imp.self_ty) != "cudaError_enum" {
        return;
    }
    for ii in &imp.items {
        let syn::ImplItem::Const(c) = ii else {
            continue;
        };
        let name = c.ident.to_string();
        let value = match &c.expr {
            syn::Expr::Call(call) => call.args.first().map(tokens).unwrap_or_default(),
            e => tokens(e),
        };
        let value: u32 = value.trim().parse().unwrap_or(u32::MAX);
        let mut doc = String::new();
        for a in &c.attrs {
            if let syn::Meta::NameValue(nv) = &a.meta {
                if nv.path.is_ident("doc") {
                    if let syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) = &nv.value
                    {
                        doc.push_str(&s.value());
                        doc.push(' ');
                    }
                }
            }
        }
        let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        let doc = doc.replace("::", "");
        out.push((name, value, doc));
    }
}

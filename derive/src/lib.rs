//! `#[derive(CEnum)]` for the fieldless `#[repr(i32)]` enums the C ABI exports (cbindgen writes
//! them into the header as C enums; the derive writes what the Rust side needs of the same
//! definition):
//!
//! - `impl TryFrom<i32>`: a code from C, or `Error::InvalidArg("unknown <what> <code>")`;
//! - `ALL`: every value, in declaration order;
//! - `description(self) -> &'static CStr`: the variant's doc comment, the text the header shows.
//!
//! `#[c_enum(what = "dtype code")]` names the codes in the error message. The generated code
//! refers to `crate::error::Error`: the derive is for the tensorref crate itself.

use proc_macro::TokenStream;
use proc_macro2::{Literal, Span};
use quote::quote;
use syn::{parse_macro_input, Data, DeriveInput, Expr, Fields, Lit, LitStr, Meta};

#[proc_macro_derive(CEnum, attributes(c_enum))]
pub fn derive_c_enum(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input).unwrap_or_else(syn::Error::into_compile_error).into()
}

fn expand(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let name = &input.ident;
    let Data::Enum(data) = &input.data else {
        return Err(syn::Error::new_spanned(input, "CEnum is for fieldless enums"));
    };
    if !has_repr_i32(input) {
        return Err(syn::Error::new_spanned(name, "CEnum needs #[repr(i32)]: the C ABI passes the codes as int32_t"));
    }
    let what = what(input)?;
    let mut variants = Vec::new();
    let mut texts = Vec::new();
    for v in &data.variants {
        if !matches!(v.fields, Fields::Unit) {
            return Err(syn::Error::new_spanned(v, "CEnum is for fieldless enums"));
        }
        let doc = doc_text(&v.attrs);
        if doc.is_empty() {
            return Err(syn::Error::new_spanned(v, "every CEnum value needs a doc comment: it is its description"));
        }
        variants.push(&v.ident);
        texts.push(Literal::c_string(&std::ffi::CString::new(doc).map_err(|_| syn::Error::new_spanned(v, "NUL in a doc comment"))?));
    }
    let n = variants.len();
    let unknown = LitStr::new(&format!("unknown {what} {{}}"), Span::call_site());
    Ok(quote! {
        impl #name {
            /// Every value, in declaration order.
            pub const ALL: [#name; #n] = [#(#name::#variants),*];

            /// The value's doc comment: the text the header shows for it.
            pub const fn description(self) -> &'static ::std::ffi::CStr {
                match self {
                    #(#name::#variants => #texts,)*
                }
            }
        }

        impl ::std::convert::TryFrom<i32> for #name {
            type Error = crate::error::Error;

            fn try_from(code: i32) -> ::std::result::Result<Self, Self::Error> {
                #(if code == #name::#variants as i32 { return Ok(#name::#variants); })*
                Err(crate::error::Error::InvalidArg(format!(#unknown, code)))
            }
        }
    })
}

fn has_repr_i32(input: &DeriveInput) -> bool {
    input.attrs.iter().any(|a| {
        a.path().is_ident("repr") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "i32")
    })
}

/// `#[c_enum(what = "...")]`, or the enum's name in lower case.
fn what(input: &DeriveInput) -> syn::Result<String> {
    let mut what = input.ident.to_string().to_lowercase();
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("c_enum")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("what") {
                what = meta.value()?.parse::<LitStr>()?.value();
                Ok(())
            } else {
                Err(meta.error("expected `what = \"...\"`"))
            }
        })?;
    }
    Ok(what)
}

/// The `///` lines joined by spaces, trimmed.
fn doc_text(attrs: &[syn::Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                Expr::Lit(e) => match &e.lit {
                    Lit::Str(s) => Some(s.value().trim().to_string()),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect();
    lines.join(" ").trim().to_string()
}

//! Library and ABI versions. `TR_ABI_VERSION` changes only when a released function changes
//! meaning or signature; every binding compares it with `tr_abi_version()` when it loads.

use std::ffi::{c_char, CString};
use std::sync::OnceLock;

pub const TR_VERSION_MAJOR: u32 = 0;
pub const TR_VERSION_MINOR: u32 = 1;
pub const TR_VERSION_PATCH: u32 = 0;
pub const TR_ABI_VERSION: u32 = 6;

/// The ABI version the library was built with; equals the header's TR_ABI_VERSION when the
/// header and the library match.
#[no_mangle]
pub extern "C" fn tr_abi_version() -> u32 {
    TR_ABI_VERSION
}

/// Static text: the library version, the ABI version, the libtorch version it was built
/// against, and whether CUDA is compiled in and available. Never NULL, never to be freed.
#[no_mangle]
pub extern "C" fn tr_version() -> *const c_char {
    static TEXT: OnceLock<CString> = OnceLock::new();
    TEXT.get_or_init(|| {
        let yes = |b: bool| if b { "yes" } else { "no" };
        CString::new(format!(
            "libtensorref {}.{}.{} (ABI {}; libtorch {}; CUDA compiled in: {}, available: {})",
            TR_VERSION_MAJOR,
            TR_VERSION_MINOR,
            TR_VERSION_PATCH,
            TR_ABI_VERSION,
            env!("TR_LIBTORCH_VERSION"),
            yes(tch::utils::has_cuda()),
            yes(tch::Cuda::is_available()),
        ))
        .expect("version text has no NUL")
    })
    .as_ptr()
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_constants_match_the_crate() {
        let v = [super::TR_VERSION_MAJOR, super::TR_VERSION_MINOR, super::TR_VERSION_PATCH].map(|n| n.to_string());
        assert_eq!(v.join("."), env!("CARGO_PKG_VERSION"));
    }
}

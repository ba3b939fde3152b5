//! The C ABI (conventions: shared/spec/c-abi.md). cbindgen turns these modules into
//! `include/tensorref.h`. Every exported body runs inside `boundary::call`, the one panic
//! boundary. Like rustls-ffi, the functions are safe `extern "C" fn`s: the pointer contract is
//! the C caller's, stated on each function, and checked for NULL on entry.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod boundary;
mod dlpack;
mod handles;
#[cfg(feature = "models")]
mod models;
mod ops;
mod residency;
mod scope;
mod tensor;
mod version;
mod weights;

pub use boundary::{tr_last_error, tr_status_str};
pub use dlpack::*;
pub use handles::*;
#[cfg(feature = "models")]
pub use models::*;
pub use ops::*;
pub use residency::*;
pub use scope::*;
pub use tensor::*;
pub use version::*;
pub use weights::*;

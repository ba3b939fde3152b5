//! The C ABI (conventions: docs/c-abi.md). cbindgen turns these modules into
//! `include/tensorref.h`, in the order they are declared here: the core first (versions, errors,
//! tensor lifetime and data, scopes), then DLPack, the residency manager and saved tensors for a host's own autograd engine, and weights.
//! The op functions (`ops`, generated from the op table) get a header of their own,
//! `include/tensorref_ops.h`, which tensorref.h includes. The demonstration model (`models`,
//! behind the Cargo feature of that name) is an add-on with its own header,
//! `include/tensorref_minilm.h`, which includes tensorref.h. Every exported body runs inside
//! `boundary::call`, the one panic boundary. Like rustls-ffi, the functions are safe
//! `extern "C" fn`s: the pointer contract is the C caller's, stated on each function, and
//! checked for NULL on entry.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod version;
pub(crate) mod boundary;
mod handles;
mod tensor;
mod scope;
mod dlpack;
mod residency;
mod saved;
mod weights;
mod torch_device;
/// cbindgen:ignore
#[cfg(feature = "models")]
mod models;
/// cbindgen:ignore
mod ops_generated;

pub use boundary::{tr_last_error, tr_status_str};
pub use dlpack::*;
pub use handles::*;
#[cfg(feature = "models")]
pub use models::*;
pub use ops_generated::*;
pub use residency::*;
pub use saved::*;
pub use scope::*;
pub use tensor::*;
pub use torch_device::*;
pub use version::*;
pub use weights::*;

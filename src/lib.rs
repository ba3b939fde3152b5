//! libtensorref: the lifetime and the device residency of libtorch tensors, behind one stable
//! C ABI shared by C, C++, .NET, Python and Rust.
//!
//! * [`Tensor`] is a reference-counted handle in one process-wide registry (`registry`).
//! * [`Scope`] / [`with_scope`] are TorchSharp's dispose scopes (`scope`).
//! * Ops are methods on [`Tensor`], generated from the op table `src/ops/ops.def` (`ops`).
//! * `ffi` is the C ABI; cbindgen turns it into `include/tensorref.h`.
//!
//! ```no_run
//! use tensorref::{with_scope, DType, Tensor};
//! let w = Tensor::randn(&[4, 4], DType::F32)?;
//! let y = with_scope(|_| -> tensorref::Result<Tensor> {
//!     let h = w.matmul(&w)?.relu()?; // temporaries die with the scope
//!     let y = h.sum()?;
//!     y.move_to_outer_scope()?;
//!     Ok(y)
//! })?;
//! println!("{}", y.item()?);
//! # Ok::<(), tensorref::Error>(())
//! ```

pub mod dtype;
pub mod error;
pub mod ffi;
mod interop;
#[cfg(feature = "models")]
pub mod models;
mod shim;
mod ops;
mod registry;
pub mod residency;
pub mod scope;
mod tensor;
/// cbindgen:ignore
pub mod torch_device;
pub mod weights;

pub use dtype::{DType, Element};
pub use error::{Error, HandleKind, Result, Status};
pub use ops::{manual_seed, no_grad, NoGradGuard, Scalar};
pub use registry::{live_bytes, live_handles, ScopeId, TensorId};
pub use scope::{with_scope, Scope, Stats};
pub use tensor::Tensor;

//! libtensorref: the lifetime and the device residency of libtorch tensors, behind one stable
//! C ABI shared by C, C++, .NET, Python and Rust.
//!
//! * [`Tensor`] is a reference-counted handle in one process-wide registry (`registry`).
//! * [`Scope`] / [`with_scope`] are TorchSharp's dispose scopes (`scope`).
//! * Ops are methods on [`Tensor`], generated from the op table `src/ops/ops.def` (`ops`).
//! * [`residency`] keeps every tensor's device copy under one byte budget (Resident, Genoa, Flow).
//! * [`torch_device`] is the `tensorref` device in libtorch's dispatcher, for models written in
//!   plain PyTorch or ATen.
//! * `ffi` is the C ABI; cbindgen turns it into `include/tensorref.h`.
//!
//! The library links libtorch 2.11 (the PyTorch wheel's, found as `tch` finds it:
//! `LIBTORCH_USE_PYTORCH=1` with that wheel installed, or `LIBTORCH`).
//!
//! # Dispose scopes
//!
//! Every tensor made inside a scope dies with it, but for what is moved out:
//!
//! ```
//! use tensorref::{live_handles, with_scope, DType, Tensor};
//! let w = Tensor::randn(&[4, 4], DType::F32)?;
//! let before = live_handles();
//! let y = with_scope(|_| -> tensorref::Result<Tensor> {
//!     let h = w.matmul(&w)?.relu()?; // temporaries die with the scope
//!     let y = h.sum()?;
//!     y.move_to_outer_scope()?;
//!     Ok(y)
//! })?;
//! assert_eq!(live_handles(), before + 1); // only `y` is left
//! assert!(y.item()? >= 0.0);
//! # Ok::<(), tensorref::Error>(())
//! ```
//!
//! # The residency manager
//!
//! Weights four times the budget run under Flow, on the simulated device (the host's kernels
//! under a device budget, so that results equal the CPU's bit for bit); from the second pass on,
//! Flow evicts by next use and loads the next layers ahead:
//!
//! ```
//! use tensorref::residency::{self, Config, Device, Policy};
//! use tensorref::{with_scope, DType, Tensor};
//! let layers: Vec<Tensor> = (0..8).map(|_| Tensor::randn(&[64, 64], DType::F32)).collect::<Result<_, _>>()?;
//! let budget = 2 * 64 * 64 * 4; // two of the eight layers
//! residency::configure(Config::new(Device::Simulated, Policy::Flow, budget))?;
//! let x = Tensor::randn(&[16, 64], DType::F32)?;
//! for _pass in 0..3 {
//!     with_scope(|_| -> tensorref::Result<()> {
//!         let mut h = x.retain()?;
//!         for w in &layers {
//!             h = h.matmul(w)?.relu()?;
//!         }
//!         h.sum()?.item()?;
//!         Ok(())
//!     })?;
//!     residency::mark_iteration()?;
//! }
//! let stats = residency::stats().expect("configured");
//! assert!(stats.peak_device_bytes <= budget);
//! assert!(stats.prefetch_hits > 0);
//! residency::disable()?;
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

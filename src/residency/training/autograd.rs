//! Autograd's state that tch does not reach (autograd.cpp beside this file): grad mode, joining
//! a device copy's gradient to the tensor it stands for, leaves' gradients, version counters,
//! and the hooks through which the library's engine hands saved tensors to the manager.

use crate::shim::{make, run, Result};
use std::ffi::{c_char, c_int, c_void};

// ---------------------------------------------------------------- grad mode (tch reads no state)

/// Sets this thread's grad mode and returns the previous one (the C ABI's manual guard; Rust
/// code uses `NoGradGuard`).
pub(crate) fn set_grad_enabled(enabled: bool) -> bool {
    // SAFETY: a plain call into libtorch's thread-local GradMode; it cannot fail.
    unsafe { torch_sys::at_grad_set_enabled(i32::from(enabled)) != 0 }
}

/// Whether this thread tracks gradients now.
pub(crate) fn grad_enabled() -> bool {
    let previous = set_grad_enabled(true);
    set_grad_enabled(previous);
    previous
}

// ---------------------------------------------------------------- autograd (autograd.cpp)

#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_connect_grad(to: *const c_void, from: *const c_void, accumulate: Option<AccumulateFn>, managed_leaf: c_int, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_manage_saved(pack: PackFn, unpack: UnpackFn, free: FreeFn, on: c_int, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_tensor_of_impl(tensor_impl: *mut c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_saved_managed() -> c_int;
    fn tr_native_version(t: *const c_void) -> u32;
    fn tr_native_share_version(to: *const c_void, from: *const c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_set_grad(t: *const c_void, grad: *const c_void, err: *mut c_char, err_len: usize) -> c_int;
}

/// Makes `to` (a copy of `from`'s values) hand the gradient it receives on to `from`: the
/// device copy of a tensor requiring grad, or the host tensor registered for a device result.
pub(crate) fn connect_grad(to: &tch::Tensor, from: &tch::Tensor) -> Result<()> {
    // SAFETY: both are live for the call.
    run("connect gradient", |err, len| unsafe { tr_native_connect_grad(to.as_ptr().cast(), from.as_ptr().cast(), None, 0, err, len) })
}

/// Accumulates a leaf's gradient where the manager keeps it: gets a new `at::Tensor*` for the
/// leaf and one for the gradient; 0, or 1 with a message in the buffer.
pub(crate) type AccumulateFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_char, usize) -> c_int;

/// Makes `to` (a device copy of the leaf `leaf`) hand the gradient it receives to `accumulate`
/// rather than to the leaf's own accumulator.
pub(crate) fn connect_leaf(to: &tch::Tensor, leaf: &tch::Tensor, accumulate: AccumulateFn) -> Result<()> {
    // SAFETY: both are live for the call; the function lives as long as the program.
    run("connect gradient", |err, len| unsafe { tr_native_connect_grad(to.as_ptr().cast(), leaf.as_ptr().cast(), Some(accumulate), 1, err, len) })
}

/// Makes `to` (another copy or view of `from`'s storage) share `from`'s version counter.
pub(crate) fn share_version(to: &tch::Tensor, from: &tch::Tensor) -> Result<()> {
    // SAFETY: both are live for the call.
    run("share version counter", |err, len| unsafe { tr_native_share_version(to.as_ptr().cast(), from.as_ptr().cast(), err, len) })
}

/// Sets the gradient `t` reports.
pub(crate) fn set_grad(t: &tch::Tensor, grad: &tch::Tensor) -> Result<()> {
    // SAFETY: both are live for the call.
    run("set gradient", |err, len| unsafe { tr_native_set_grad(t.as_ptr().cast(), grad.as_ptr().cast(), err, len) })
}

/// The manager's side of saved tensors (see autograd.cpp): pack takes a new `at::Tensor*` and
/// returns a token, or null with a message in the buffer; unpack writes a new `at::Tensor*`
/// for a token (0), or fails (1, with a message); free drops a token.
pub(crate) type PackFn = unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> *mut c_void;
pub(crate) type UnpackFn = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut c_char, usize) -> c_int;
pub(crate) type FreeFn = unsafe extern "C" fn(*mut c_void);

/// Hands every tensor autograd saves to `pack` (and back through `unpack`) while `on`, where it
/// can: not where another engine than libtorch's own (PyTorch's Python engine) runs backward
/// (`saved_managed` says which).
pub(crate) fn manage_saved(pack: PackFn, unpack: UnpackFn, free: FreeFn, on: bool) -> Result<()> {
    // SAFETY: the functions live as long as the program.
    run("saved tensors", |err, len| unsafe { tr_native_manage_saved(pack, unpack, free, on.into(), err, len) })
}

/// A tensor holding one more reference to `tensor_impl`, a `c10::TensorImpl*` of this process's
/// libtorch (a tensor another autograd engine saves for backward).
///
/// # Safety
/// `tensor_impl` points to a live TensorImpl for the call.
pub(crate) unsafe fn tensor_of_impl(tensor_impl: *mut c_void) -> Result<tch::Tensor> {
    // SAFETY: the caller's contract.
    make("tensor of TensorImpl", |out, err, len| unsafe { tr_native_tensor_of_impl(tensor_impl, out, err, len) })
}

/// Whether the library's engine hands saved tensors to `pack` now: turned on by `manage_saved`,
/// and still the default engine (a later `import torch` makes PyTorch's the default).
pub(crate) fn saved_managed() -> bool {
    // SAFETY: reads two atomics and libtorch's default engine.
    unsafe { tr_native_saved_managed() != 0 }
}

/// The version of `t`'s data: autograd's version counter, bumped by every in-place write (0 for
/// a tensor made in inference mode, which has none: only the writes the manager sees count).
pub(crate) fn version(t: &tch::Tensor) -> u32 {
    // SAFETY: `t` is live for the call.
    unsafe { tr_native_version(t.as_ptr().cast()) }
}

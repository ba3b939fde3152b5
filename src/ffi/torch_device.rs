//! The `tensorref` device in libtorch's dispatcher (src/torch_device).

use super::boundary::{self, call, out_arg};
use super::handles::TrTensor;
use crate::error::{Error, Status};
use crate::registry;
use std::ffi::c_void;

/// Registers the `tensorref` device with the libtorch this library runs on: afterwards
/// `at::Tensor`s on device `tensorref` (libtorch's PrivateUse1 backend, renamed) are the residency
/// manager's, and every aten op on them runs under it. Idempotent: later calls return the first
/// call's status. Fails with TR_ERR_TORCH when another backend has taken PrivateUse1. Python's
/// `import tensorref` calls it and names the device on the torch side too.
#[no_mangle]
pub extern "C" fn tr_torch_device_register() -> Status {
    boundary::call(crate::torch_device::register)
}

/// Writes to `*out_tensor_impl` a tensor of the `tensorref` device over the storage of `t`, with
/// its dtype, sizes, strides and offset: a new `c10::TensorImpl*` reference of the libtorch this
/// library uses, which the caller owns (C++: `at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim(p))`,
/// as include/tensorref_torch.hpp does; else `tr_torch_device_tensor_release`). The handle and the tensor are one storage of the
/// residency manager: ATen ops on the tensor run under it, each sees the other's writes, and the
/// storage lives while either does. Registers the device if it is not yet.
/// Errors: TR_ERR_NULL_ARG, TR_ERR_STALE_HANDLE, TR_ERR_INVALID_HANDLE; TR_ERR_INVALID_ARG (`t` is
/// on a GPU with no manager configured: a device tensor's home is host memory); TR_ERR_TORCH.
/// Safe to call from any thread.
#[no_mangle]
pub extern "C" fn tr_torch_device_tensor(t: TrTensor, out_tensor_impl: *mut *mut c_void) -> Status {
    call(|| {
        let out = out_arg(out_tensor_impl, "out_tensor_impl")?;
        let [entry] = registry::get([t.into()])?;
        *out = crate::torch_device::tensor_of(&entry)?;
        Ok(())
    })
}

/// Drops the `c10::TensorImpl*` reference `tr_torch_device_tensor` gave, once the program has
/// handed the tensor on (for a caller without C++: a C program, Python's
/// `torch._C._wrap_tensor_impl`, which takes a reference of its own). NULL is a no-op.
/// Safe to call from any thread, once per reference.
#[no_mangle]
pub extern "C" fn tr_torch_device_tensor_release(tensor_impl: *mut c_void) -> Status {
    call(|| {
        if !tensor_impl.is_null() {
            // SAFETY: a reference from tr_torch_device_tensor, given up once (documented).
            unsafe { crate::torch_device::release_tensor(tensor_impl) };
        }
        Ok(())
    })
}

/// A new handle (owned by this thread's current scope, or by the caller) over the storage of
/// `tensor_impl`, a `c10::TensorImpl*` of a tensor on the `tensorref` device (C++:
/// `tensor.unsafeGetTensorImpl()`; Python: `torch.Tensor._cdata`), with its dtype and geometry:
/// one storage of the residency manager with that tensor. The tensor stays its owner's.
/// Errors: TR_ERR_NULL_ARG; TR_ERR_INVALID_ARG (a tensor of another device); TR_ERR_TORCH.
/// Safe to call from any thread.
#[no_mangle]
pub extern "C" fn tr_torch_device_handle(tensor_impl: *mut c_void, out: *mut TrTensor) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        if tensor_impl.is_null() {
            return Err(Error::NullArg("tensor_impl"));
        }
        // SAFETY: the caller passes a live TensorImpl (documented).
        let t = unsafe { crate::residency::autograd::tensor_of_impl(tensor_impl) }?;
        *out = registry::insert(crate::torch_device::entry_of(&t)?).into();
        Ok(())
    })
}

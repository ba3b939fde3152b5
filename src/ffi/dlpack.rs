//! DLPack: zero-copy exchange of tensors with PyTorch, NumPy, CuPy or JAX in the same process.

use super::boundary::{call, out_arg};
use super::handles::TrTensor;
use crate::error::{Error, Status};
use crate::interop::dlpack;
use std::ffi::c_void;

/// Registers the tensor described by `managed`, a `DLManagedTensor*` (the unversioned struct of
/// dlpack.h, as made by `torch.utils.dlpack.to_dlpack` or a `__dlpack__()` capsule), sharing its
/// memory: writes through either side are seen by the other. On success `*out` receives a new
/// handle owned by this thread's current scope (or by the caller when no scope is open).
///
/// Ownership: the call always takes `managed` over, whatever it returns. Its deleter runs once,
/// when the last handle (and libtorch view) sharing the memory is gone, on the thread that frees
/// it, or before this returns if the call fails. The caller must not use or delete it again.
/// Errors: TR_ERR_NULL_ARG (`managed` or `out` NULL), TR_ERR_DTYPE (a dtype libtensorref does not
/// support), TR_ERR_DEVICE or TR_ERR_TORCH (libtorch rejects the description).
/// Safe to call from any thread.
#[no_mangle]
pub extern "C" fn tr_tensor_from_dlpack(managed: *mut c_void, out: *mut TrTensor) -> Status {
    call(|| {
        if managed.is_null() {
            return Err(Error::NullArg("managed"));
        }
        let Ok(out) = out_arg(out, "out") else {
            // SAFETY: the caller hands `managed` over (documented); it is given back unused.
            unsafe { dlpack::discard(managed) };
            return Err(Error::NullArg("out"));
        };
        // SAFETY: the caller hands over a valid DLManagedTensor (documented).
        *out = unsafe { dlpack::from_dlpack(managed) }?.into();
        Ok(())
    })
}

/// Exports `t` as a new `DLManagedTensor*` (the unversioned struct of dlpack.h) written to
/// `*out_managed`, sharing its memory (no copy; the autograd graph is not carried). The caller
/// owns it and must run its deleter once, or hand it to a consumer that does (for example
/// `torch.utils.dlpack.from_dlpack` through a "dltensor" capsule). `t` stays valid and owned as
/// before; the memory lives until both `t` and the export are gone.
/// Errors: TR_ERR_NULL_ARG, TR_ERR_STALE_HANDLE, TR_ERR_INVALID_HANDLE, TR_ERR_TORCH.
/// Safe to call from any thread.
#[no_mangle]
pub extern "C" fn tr_tensor_to_dlpack(t: TrTensor, out_managed: *mut *mut c_void) -> Status {
    call(|| {
        let out = out_arg(out_managed, "out_managed")?;
        *out = dlpack::to_dlpack(t.into())?;
        Ok(())
    })
}

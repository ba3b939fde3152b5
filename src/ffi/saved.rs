//! Saved tensors for a host language's own autograd engine. Where libtorch's engine runs
//! backward, the library's engine hooks hand every tensor autograd saves to the residency
//! manager by themselves. PyTorch's Python engine (in a Python process that imported torch) asks
//! its own hook stack instead; the Python binding makes hooks that call these functions, and the
//! library pushes them there only while its own calls run (`tr_saved_hooks_adopt`).

use super::boundary::{call, call_unhooked, out_arg};
use crate::error::{Error, Status};
use crate::interop::dlpack;
use crate::residency::{self, Saved};
use std::ffi::c_void;

/// A saved-tensor pack hook's work: hands `tensor_impl`, a tensor an autograd engine saves for
/// backward, to the residency manager, which keeps it like any other storage (evictable, loaded
/// again for backward). `tensor_impl` is a `c10::TensorImpl*` of the libtorch this library uses
/// (in Python, `torch.Tensor._cdata`); the saved tensor takes its own reference to it. Without a
/// manager that moves data it is kept as it is. On success `*out_saved` receives a token for
/// `tr_saved_unpack`, which the caller owns and frees once with `tr_saved_free`.
/// Errors: TR_ERR_NULL_ARG; TR_ERR_OUT_OF_MEMORY or TR_ERR_BUDGET_TOO_SMALL (no room on the
/// device for it); TR_ERR_TORCH. Safe to call from any thread.
#[no_mangle]
pub extern "C" fn tr_saved_pack(tensor_impl: *mut c_void, out_saved: *mut *mut c_void) -> Status {
    call(|| {
        let out = out_arg(out_saved, "out_saved")?;
        if tensor_impl.is_null() {
            return Err(Error::NullArg("tensor_impl"));
        }
        // SAFETY: the caller passes a live TensorImpl (documented).
        let t = unsafe { crate::residency::autograd::tensor_of_impl(tensor_impl) }?;
        *out = Box::into_raw(Box::new(residency::save_for_backward(t)?)).cast();
        Ok(())
    })
}

/// A saved-tensor unpack hook's work: the tensor `saved` (a token from `tr_saved_pack`) stands
/// for, on the compute device (loaded if it was evicted), written to `*out_managed` as a new
/// `DLManagedTensor*` (the unversioned struct of dlpack.h) sharing its memory, which the caller
/// owns and must hand to a consumer (`torch.utils.dlpack.from_dlpack`) or delete once. May be
/// called more than once for one token.
/// Errors: TR_ERR_NULL_ARG; TR_ERR_INVALID_ARG (the tensor was modified by an in-place op since
/// it was saved); TR_ERR_OUT_OF_MEMORY or TR_ERR_BUDGET_TOO_SMALL; TR_ERR_TORCH.
/// Safe to call from any thread, never at once with `tr_saved_free` on the same token.
#[no_mangle]
pub extern "C" fn tr_saved_unpack(saved: *mut c_void, out_managed: *mut *mut c_void) -> Status {
    call(|| {
        let out = out_arg(out_managed, "out_managed")?;
        // SAFETY: a token from tr_saved_pack, not yet freed (documented).
        let saved = unsafe { saved.cast_const().cast::<Saved>().as_ref() }.ok_or(Error::NullArg("saved"))?;
        *out = dlpack::export(&saved.unpack()?)?;
        Ok(())
    })
}

/// Frees a token from `tr_saved_pack`: the manager forgets the saved tensor once nothing else
/// uses its storage. NULL is a no-op. Safe to call from any thread, once per token.
#[no_mangle]
pub extern "C" fn tr_saved_free(saved: *mut c_void) -> Status {
    call(|| {
        if !saved.is_null() {
            // SAFETY: a token from tr_saved_pack, freed once (documented).
            drop(unsafe { Box::from_raw(saved.cast::<Saved>()) });
        }
        Ok(())
    })
}

/// Adopts the saved-tensor hooks on the top of the calling thread's PyTorch hook stack
/// (`at::SavedTensorDefaultHooks`, where `torch.autograd.graph.saved_tensors_hooks` pushes them):
/// takes them off the stack, and from then on every call into the library from this thread has
/// them pushed while it runs. So they apply to what the library's own ops save for backward, and
/// not to what the program's torch code saves (whose autograd checks, and `torch.func`, which
/// refuses to run under hooks, stay as without the library). Give them back with
/// `tr_saved_hooks_return` before the context that pushed them exits. For a binding over
/// PyTorch's Python engine, where the tensors the library's ops save reach `tr_saved_pack` only
/// through such hooks. Errors: TR_ERR_TORCH (no hooks on the stack, or this thread adopted some
/// already).
#[no_mangle]
pub extern "C" fn tr_saved_hooks_adopt() -> Status {
    call_unhooked(|| Ok(crate::residency::python_hooks::adopt()?))
}

/// Pushes the hooks `tr_saved_hooks_adopt` took on this thread back on its stack, where the
/// context that pushed them pops them. No-op where this thread adopted none. Errors: TR_ERR_TORCH.
#[no_mangle]
pub extern "C" fn tr_saved_hooks_return() -> Status {
    call_unhooked(|| Ok(crate::residency::python_hooks::give_back()?))
}

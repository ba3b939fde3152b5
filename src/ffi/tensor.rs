//! Tensor lifecycle, host data and metadata, seed and grad mode.

use super::boundary::{call, call_unhooked, handles_arg, out_arg, slice_arg, slice_out};
use super::handles::{TrDtype, TrScalar, TrScope, TrTensor};
use crate::dtype::DType;
use super::residency::{DeviceKind, TrDevice};
use crate::error::{Error, Status};
use crate::ops::data;
use crate::registry::{self, TensorId};

/// Adds a reference to `t`; each reference needs its own `tr_tensor_release`.
/// Errors: TR_ERR_STALE_HANDLE, TR_ERR_INVALID_HANDLE. Safe to call from any thread.
#[no_mangle]
pub extern "C" fn tr_tensor_retain(t: TrTensor) -> Status {
    call_unhooked(|| registry::retain(t.into())) // runs no op: nothing saved for backward
}

/// Drops one reference to `t` (TorchSharp's Dispose). At zero the handle dies, leaves its scope
/// and its storage is freed on every device. Releasing handle 0 is a no-op; releasing a dead
/// handle is TR_ERR_STALE_HANDLE and changes nothing. Releases may come in any order and from
/// any thread, including a garbage collector's finalizer thread at exit.
#[no_mangle]
pub extern "C" fn tr_tensor_release(t: TrTensor) -> Status {
    if t.id == 0 {
        return Status::TR_OK;
    }
    call_unhooked(|| registry::release(t.into())) // runs no op: nothing saved for backward
}

/// Releases `len` handles at once, under one lock (for bindings that collect releases from a
/// garbage collector). Handle 0 is skipped. Every live handle is released even if some are not;
/// the status then reports the first bad one (TR_ERR_STALE_HANDLE or TR_ERR_INVALID_HANDLE).
/// Errors: also TR_ERR_NULL_ARG when `handles` is NULL with `len` > 0.
#[no_mangle]
pub extern "C" fn tr_tensor_release_many(handles: *const TrTensor, len: usize) -> Status {
    call_unhooked(|| registry::release_many(&handles_arg(handles, len, "handles")?)) // runs no op
}

/// A new handle to the same storage as `t`, with its own reference count, owned by this
/// thread's current scope (or by the caller). Releasing one alias leaves the other valid.
/// Errors: TR_ERR_NULL_ARG, TR_ERR_STALE_HANDLE, TR_ERR_INVALID_HANDLE.
#[no_mangle]
pub extern "C" fn tr_tensor_alias(t: TrTensor, out: *mut TrTensor) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = registry::alias(t.into())?.into();
        Ok(())
    })
}

/// Writes whether `t` is a live tensor handle. Never fails on a bad handle (it writes false).
/// Errors: TR_ERR_NULL_ARG.
#[no_mangle]
pub extern "C" fn tr_tensor_is_valid(t: TrTensor, out: *mut bool) -> Status {
    call(|| {
        *out_arg(out, "out")? = registry::get([TensorId::from(t)]).is_ok();
        Ok(())
    })
}

/// Copies `len` bytes of host data into a new tensor of the given shape and dtype (row-major).
/// `len` must equal the element count times the dtype's size. `shape` may be NULL when `ndim`
/// is 0 (a scalar). On success `*out` receives a new handle owned by the current scope.
/// Errors: TR_ERR_NULL_ARG, TR_ERR_INVALID_ARG (unknown dtype, negative dimension),
/// TR_ERR_SHAPE (length does not match the shape).
#[no_mangle]
pub extern "C" fn tr_tensor_from_data(
    data: *const u8,
    len: usize,
    shape: *const i64,
    ndim: usize,
    dtype: TrDtype,
    out: *mut TrTensor,
) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        let shape = slice_arg(shape, ndim, "shape")?;
        let bytes = slice_arg(data, len, "data")?;
        *out = data::from_bytes(bytes, shape, DType::try_from(dtype)?)?.into();
        Ok(())
    })
}

/// Copies the elements of `t` as contiguous row-major host bytes into `buf`, from any device.
/// `*out_written` receives the bytes written; when `len` is too small it receives the bytes
/// needed and TR_ERR_BUFFER_TOO_SMALL is returned. Errors: TR_ERR_NULL_ARG, bad handles.
#[no_mangle]
pub extern "C" fn tr_tensor_copy_to(t: TrTensor, buf: *mut u8, len: usize, out_written: *mut usize) -> Status {
    call(|| {
        let written = out_arg(out_written, "out_written")?;
        let buf = slice_out(buf, len, "buf")?;
        *written = data::copy_to(t.into(), buf).inspect_err(|e| {
            if let crate::Error::BufferTooSmall { needed, .. } = e {
                *written = *needed;
            }
        })?;
        Ok(())
    })
}

/// Copies the sizes of `t` into `dims`. `*out_ndim` receives the number of dimensions, also
/// when `len` is too small (then TR_ERR_BUFFER_TOO_SMALL). `dims` may be NULL when `len` is 0.
#[no_mangle]
pub extern "C" fn tr_tensor_shape(t: TrTensor, dims: *mut i64, len: usize, out_ndim: *mut usize) -> Status {
    call(|| {
        let ndim = out_arg(out_ndim, "out_ndim")?;
        let dims = slice_out(dims, len, "dims")?;
        let shape = data::shape(t.into())?;
        *ndim = shape.len();
        if dims.len() < shape.len() {
            return Err(crate::Error::BufferTooSmall { needed: shape.len(), given: dims.len() });
        }
        dims[..shape.len()].copy_from_slice(&shape);
        Ok(())
    })
}

/// Writes the dtype code of `t`. Errors: TR_ERR_NULL_ARG, bad handles.
#[no_mangle]
pub extern "C" fn tr_tensor_dtype(t: TrTensor, out: *mut TrDtype) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = data::dtype(t.into())? as TrDtype;
        Ok(())
    })
}

/// Writes where the memory of `t` is, as `tr_residency_config` names devices: TR_DEVICE_CPU
/// with index 0 for host memory, TR_DEVICE_CUDA with the device number. Under a residency
/// manager this is the tensor's home; the manager's device copies are its own. Errors:
/// TR_ERR_NULL_ARG, bad handles, TR_ERR_DEVICE (memory of a kind the ABI cannot name).
#[no_mangle]
pub extern "C" fn tr_tensor_device(t: TrTensor, device: *mut TrDevice, index: *mut i32) -> Status {
    call(|| {
        let (kind, n) = match data::device(t.into())? {
            tch::Device::Cpu => (DeviceKind::Cpu, 0),
            tch::Device::Cuda(n) => (DeviceKind::Cuda, i32::try_from(n).map_err(|_| Error::Device(format!("CUDA device {n}")))?),
            other => return Err(Error::Device(format!("the tensor is on {other:?}, which the C ABI cannot name"))),
        };
        *out_arg(device, "device")? = kind as TrDevice;
        *out_arg(index, "index")? = n;
        Ok(())
    })
}

/// Writes the number of elements of `t`. Errors: TR_ERR_NULL_ARG, bad handles.
#[no_mangle]
pub extern "C" fn tr_tensor_numel(t: TrTensor, out: *mut usize) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = data::numel(t.into())?;
        Ok(())
    })
}

/// Writes the value of a one-element tensor as a double. Errors: TR_ERR_NULL_ARG, bad handles,
/// TR_ERR_SHAPE if `t` has more or fewer than one element.
#[no_mangle]
pub extern "C" fn tr_tensor_item(t: TrTensor, out: *mut f64) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = data::item(t.into())?;
        Ok(())
    })
}

/// Writes the value of a one-element tensor typed by its dtype: TR_SCALAR_KIND_INT in `i` for
/// the integer dtypes (exact, where a double would round beyond 2^53), TR_SCALAR_KIND_BOOL in
/// `b`, TR_SCALAR_KIND_FLOAT in `f` for the floating ones. Errors: TR_ERR_NULL_ARG, bad handles,
/// TR_ERR_SHAPE if `t` has more or fewer than one element.
#[no_mangle]
pub extern "C" fn tr_tensor_item_scalar(t: TrTensor, out: *mut TrScalar) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = data::item_scalar(t.into())?.into();
        Ok(())
    })
}

/// Writes the scope that owns `t`, or the handle 0 if none does.
/// Errors: TR_ERR_NULL_ARG, bad handles.
#[no_mangle]
pub extern "C" fn tr_tensor_scope(t: TrTensor, out: *mut TrScope) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = registry::lock().owner_of(t.into())?.map_or(TrScope { id: 0 }, TrScope::from);
        Ok(())
    })
}

/// Number of live tensor handles in the whole process (all threads). For leak checks.
#[no_mangle]
pub extern "C" fn tr_live_handles() -> usize {
    registry::live_handles()
}

/// Writes the logical bytes held by live handles on a device: TR_DEVICE_CPU (host memory;
/// `index` is ignored) or TR_DEVICE_CUDA with the device number. Errors: TR_ERR_NULL_ARG;
/// TR_ERR_INVALID_ARG for an unknown device, a negative index, or TR_DEVICE_SIMULATED (a manager's
/// way to compute, not where a tensor lives: its memory is host memory).
#[no_mangle]
pub extern "C" fn tr_live_bytes(device: TrDevice, index: i32, out: *mut u64) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        let device = match DeviceKind::try_from(device)? {
            DeviceKind::Cpu => tch::Device::Cpu,
            DeviceKind::Cuda => tch::Device::Cuda(usize::try_from(index).map_err(|_| Error::InvalidArg(format!("device index {index}")))?),
            DeviceKind::Simulated => {
                return Err(Error::InvalidArg("TR_DEVICE_SIMULATED names how a manager computes, not where a tensor lives: its memory is host memory (TR_DEVICE_CPU)".into()))
            }
        };
        *out = registry::live_bytes(device);
        Ok(())
    })
}

/// Seeds libtorch's default random generator (rand, randn, dropout): same seed, same values.
#[no_mangle]
pub extern "C" fn tr_manual_seed(seed: u64) -> Status {
    call(|| {
        crate::ops::manual_seed(seed);
        Ok(())
    })
}

/// Turns gradient tracking on or off for this thread (libtorch's grad mode is per thread) and
/// writes the previous mode to `*out_previous` (which may be NULL). A no-grad region is
/// `tr_grad_set_enabled(false, &prev)` ... `tr_grad_set_enabled(prev, NULL)`.
#[no_mangle]
pub extern "C" fn tr_grad_set_enabled(enabled: bool, out_previous: *mut bool) -> Status {
    call(|| {
        let previous = crate::residency::autograd::set_grad_enabled(enabled);
        if let Ok(out) = out_arg(out_previous, "out_previous") {
            *out = previous;
        }
        Ok(())
    })
}

//! Zero-copy exchange through DLPack (PyTorch, NumPy, CuPy, JAX), using libtorch's own
//! converters `at::fromDLPack` / `at::toDLPack` from the C++ shim `dlpack.cpp` beside it.
//! Both directions share memory: nothing is copied, so writes through one side are seen by the
//! other. Only the legacy, unversioned `DLManagedTensor` of dlpack.h crosses here.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::registry::{self, TensorId};
use std::ffi::{c_char, c_int, c_void, CStr};

extern "C" {
    fn tr_native_from_dlpack(managed: *mut c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_to_dlpack(tensor: *const c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_dlpack_delete(managed: *mut c_void);
}

/// Room for libtorch's message (its first line is what `Error` keeps anyway).
const ERR_LEN: usize = 1024;

/// Registers the tensor of `managed` in the current scope, sharing its memory.
///
/// Takes ownership of `managed`: its deleter runs once the last tensor using the memory is
/// freed, or before this returns if the import fails (unknown device or dtype, or a dtype
/// libtensorref does not support).
///
/// # Safety
/// `managed` is a valid `DLManagedTensor*` that nobody else will consume or delete.
pub(crate) unsafe fn from_dlpack(managed: *mut c_void) -> Result<TensorId> {
    // SAFETY: `managed` points at a DLManagedTensor (the caller's contract).
    if let Err(e) = unsafe { validate(&*managed.cast::<DLManagedTensor>()) } {
        // SAFETY: ours to give back (the caller's contract); it is not used again.
        unsafe { discard(managed) };
        return Err(e);
    }
    let mut out = std::ptr::null_mut();
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `managed` is valid and ours (the caller's contract); the shim catches every C++
    // exception and runs the deleter itself on failure.
    if unsafe { tr_native_from_dlpack(managed, &mut out, err.as_mut_ptr(), ERR_LEN) } != 0 {
        return Err(shim_error("DLPack import", &err));
    }
    // SAFETY: on success the shim returned a new heap `at::Tensor*`, which tch's `Tensor` owns
    // and deletes (it is the `C_tensor` tch wraps).
    let tensor = unsafe { tch::Tensor::from_ptr(out.cast()) };
    // An unsupported dtype: dropping `tensor` here runs the producer's deleter.
    DType::from_kind(tensor.f_kind()?)?;
    // The producer can still reach the memory: the residency manager must never cache it.
    crate::residency::torch_storage::mark_external(&tensor)?;
    Ok(registry::insert(tensor))
}

/// The head of dlpack.h's (unversioned) `DLManagedTensor`, its `DLTensor` as far as `validate`
/// reads it: data, device (type and id), ndim, dtype (code, bits, lanes), shape.
#[repr(C)]
struct DLManagedTensor {
    data: *mut c_void,
    _device: [i32; 2],
    ndim: i32,
    code: u8,
    bits: u8,
    lanes: u16,
    shape: *const i64,
}

/// dlpack.h's type codes, with the element sizes (bits) libtensorref supports for each.
const DL_TYPES: [(u8, &str, &[u8]); 5] = [(0, "kDLInt", &[8, 16, 32, 64]), (1, "kDLUInt", &[8]), (2, "kDLFloat", &[16, 32, 64]), (4, "kDLBfloat", &[16]), (6, "kDLBool", &[8])];

/// Checks a producer's description before libtorch reads memory through it: a rank libtorch
/// allows, a shape array with no negative size and no overflowing element count, data behind
/// every non-empty tensor, one lane of a type code and size libtensorref knows. libtorch checks
/// the device and the strides itself.
///
/// # Safety
/// `t.shape` points at `t.ndim` sizes, when it is not NULL and `t.ndim` is positive.
unsafe fn validate(t: &DLManagedTensor) -> Result<()> {
    let bad = |why: String| Err(Error::InvalidArg(format!("DLPack import: {why}")));
    if !(0..=64).contains(&t.ndim) {
        return bad(format!("ndim {} is not between 0 and 64", t.ndim));
    }
    if t.ndim > 0 && t.shape.is_null() {
        return bad(format!("ndim {} with a NULL shape", t.ndim));
    }
    // SAFETY: `shape` holds `ndim` sizes (the caller's contract), checked non-NULL above.
    let shape = if t.ndim == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(t.shape, t.ndim as usize) } };
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return bad(format!("negative size {d} in shape {shape:?}"));
    }
    let Some(numel) = shape.iter().try_fold(1i64, |n, &d| n.checked_mul(d)) else {
        return bad(format!("the element count of shape {shape:?} overflows"));
    };
    if numel > 0 && t.data.is_null() {
        return bad(format!("NULL data for {numel} elements"));
    }
    let Some((_, name, sizes)) = DL_TYPES.iter().find(|(code, _, _)| *code == t.code) else {
        return bad(format!("unknown dtype code {} (bits {}): libtensorref takes kDLInt, kDLUInt, kDLFloat, kDLBfloat and kDLBool", t.code, t.bits));
    };
    if !sizes.contains(&t.bits) || t.lanes != 1 {
        return Err(Error::Dtype(format!("DLPack import: {name} of {} bits and {} lanes is not a dtype libtensorref supports", t.bits, t.lanes)));
    }
    Ok(())
}

/// Exports the tensor of `id` as a new `DLManagedTensor*` sharing its memory (the autograd
/// graph is not carried). The consumer owns it and must run its deleter once.
pub(crate) fn to_dlpack(id: TensorId) -> Result<*mut c_void> {
    let [entry] = registry::get([id])?;
    // The export shares the home copy: it must be current, and stay the only copy.
    crate::residency::settle_home(&entry)?;
    export(&entry)
}

/// Exports `t` (a detached view of it: the export must not hold on to the autograd graph) as a
/// new `DLManagedTensor*` sharing its memory. The consumer owns it and must run its deleter once.
pub(crate) fn export(t: &tch::Tensor) -> Result<*mut c_void> {
    let data = t.f_detach()?;
    let mut out = std::ptr::null_mut();
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `data.as_ptr()` is a live `at::Tensor*`, borrowed for the call only.
    if unsafe { tr_native_to_dlpack(data.as_ptr().cast(), &mut out, err.as_mut_ptr(), ERR_LEN) } != 0 {
        return Err(shim_error("DLPack export", &err));
    }
    Ok(out)
}

/// Gives back a `DLManagedTensor*` that will not be imported: runs its deleter.
///
/// # Safety
/// As for [`from_dlpack`]; NULL is a no-op.
pub(crate) unsafe fn discard(managed: *mut c_void) {
    // SAFETY: the caller's contract.
    unsafe { tr_native_dlpack_delete(managed) }
}

/// libtorch's message from the shim, classified like every other libtorch error.
fn shim_error(what: &str, err: &[c_char]) -> Error {
    // SAFETY: the shim always NUL-terminates within the buffer (and it starts zeroed).
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
    Error::from(tch::TchError::Torch(format!("{what}: {msg}")))
}

//! How the C++ shims reach Rust: each `.cpp` file sits beside the Rust module that wraps it
//! (src/residency/core/torch_storage.cpp and outputs.cpp, src/residency/device/cuda.cpp and
//! memory.cpp, src/residency/training/autograd.cpp and python_hooks.cpp, src/ops/kernels.cpp
//! and random.cpp, the kernels generated from libtorch's schema in src/ops/aten/generated (with
//! args.h and outputs.cpp beside their module), src/interop/dlpack.cpp, and the `tensorref`
//! device's files in src/torch_device), built by build.rs against the wheel's headers. C++ that
//! walks an op's boxed values shares `ivalue_tensors.h` here. The `tensorref` device's C++ also
//! calls back into Rust, through a table of functions it is given at registration
//! (src/torch_device/mod.rs). Tensors cross as `at::Tensor*`; every shim returns 0, or 1 with
//! libtorch's message in a caller's buffer (`guarded.h` here), which becomes a `TchError`, so the
//! wrappers work inside op bodies as tch's own `f_*` calls do.

use std::ffi::{c_char, c_int, c_void, CStr};
use tch::TchError;

pub(crate) type Result<T> = std::result::Result<T, TchError>;

/// Room for libtorch's first line (what `Error` keeps anyway).
pub(crate) const ERR_LEN: usize = 512;

/// Runs `call` with a shim's error buffer, and returns its status as a `Result`. Only a failed
/// shim writes its message there (NUL-terminated: guarded.h), so only the first byte is cleared,
/// which an unwritten buffer then reads as: on the per-op path, clearing all of it cost more than
/// some of the calls.
#[inline(always)]
fn guarded(what: &str, call: impl FnOnce(*mut c_char) -> c_int) -> Result<()> {
    let mut err = std::mem::MaybeUninit::<[c_char; ERR_LEN]>::uninit();
    let err = err.as_mut_ptr().cast::<c_char>();
    // SAFETY: the first of the buffer's ERR_LEN bytes.
    unsafe { err.write(0) };
    let status = call(err);
    // SAFETY: a NUL-terminated string starts the buffer, the shim's message or the one written.
    unsafe { checked(what, status, err) }
}

/// Runs a shim that makes one tensor.
pub(crate) fn make(what: &str, call: impl FnOnce(*mut *mut c_void, *mut c_char, usize) -> c_int) -> Result<tch::Tensor> {
    let mut out = std::ptr::null_mut();
    guarded(what, |err| call(&mut out, err, ERR_LEN))?;
    // SAFETY: on success the shim wrote a new heap `at::Tensor*`, which tch's Tensor owns.
    Ok(unsafe { tch::Tensor::from_ptr(out.cast()) })
}

/// A shim's status as a `Result`, with its message from `err` (a zeroed buffer it wrote into).
pub(crate) fn check(what: &str, status: c_int, err: &[c_char]) -> Result<()> {
    // SAFETY: the shims NUL-terminate within the buffer (and it starts zeroed).
    unsafe { checked(what, status, err.as_ptr()) }
}

/// `check` for the message at `err`.
///
/// # Safety
/// On failure, `err` points to a NUL-terminated string.
unsafe fn checked(what: &str, status: c_int, err: *const c_char) -> Result<()> {
    if status == 0 {
        return Ok(());
    }
    // SAFETY: as the caller promises.
    let msg = unsafe { CStr::from_ptr(err) }.to_string_lossy();
    Err(TchError::Torch(format!("{what}: {msg}")))
}

/// Runs a shim that makes nothing.
pub(crate) fn run(what: &str, call: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<()> {
    guarded(what, |err| call(err, ERR_LEN))
}

/// Copies `msg` NUL-terminated into a shim's error buffer (the other way from `check`).
pub(crate) fn write_error(err: *mut c_char, err_len: usize, msg: &str) {
    if err.is_null() || err_len == 0 {
        return;
    }
    let n = msg.len().min(err_len - 1);
    // SAFETY: the buffer holds `err_len` bytes; n + 1 <= err_len.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr().cast::<c_char>(), err, n);
        *err.add(n) = 0;
    }
}

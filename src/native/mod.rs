//! The C++ shims (the `.cpp` files beside this one, built by build.rs against the wheel's
//! headers) and their safe Rust wrappers: what tch does not expose. Tensors cross as
//! `at::Tensor*`; every shim returns 0, or 1 with libtorch's message in a caller's buffer, which
//! becomes a `TchError` (so the wrappers work inside op bodies as tch's own `f_*` calls do).

use crate::dtype::DType;
use crate::ops::Scalar;
use std::ffi::{c_char, c_double, c_int, c_void, CStr};
use tch::TchError;

type Result<T> = std::result::Result<T, TchError>;

// The shims are internal: keep them out of the public header.
#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_scalar_like(like: *const c_void, tag: c_int, i: i64, f: c_double, kind: c_int, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_fill(t: *const c_void, tag: c_int, i: i64, f: c_double, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_to_meta(t: *const c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_is_meta(t: *const c_void) -> c_int;
    fn tr_native_pow(t: *const c_void, tag: c_int, i: i64, f: c_double, how: c_int, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_arange(start: c_double, end: c_double, step: c_double, kind: c_int, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
}

/// Room for libtorch's first line (what `Error` keeps anyway).
pub(crate) const ERR_LEN: usize = 512;

/// Runs a shim that makes one tensor.
pub(crate) fn make(what: &str, call: impl FnOnce(*mut *mut c_void, *mut c_char, usize) -> c_int) -> Result<tch::Tensor> {
    let mut out = std::ptr::null_mut();
    let mut err = [0 as c_char; ERR_LEN];
    check(what, call(&mut out, err.as_mut_ptr(), ERR_LEN), &err)?;
    // SAFETY: on success the shim wrote a new heap `at::Tensor*`, which tch's Tensor owns.
    Ok(unsafe { tch::Tensor::from_ptr(out.cast()) })
}

/// A shim's status as a `Result`, with its message.
pub(crate) fn check(what: &str, status: c_int, err: &[c_char]) -> Result<()> {
    if status == 0 {
        return Ok(());
    }
    // SAFETY: the shims NUL-terminate within the buffer (and it starts zeroed).
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy();
    Err(TchError::Torch(format!("{what}: {msg}")))
}

/// A scalar as the shims take it: a tag (0 int, 1 float, 2 bool) and its int and float slots.
fn tagged(value: Scalar) -> (c_int, i64, c_double) {
    match value {
        Scalar::Int(i) => (0, i, 0.0),
        Scalar::Float(f) => (1, 0, f),
        Scalar::Bool(b) => (2, i64::from(b), 0.0),
    }
}

/// A 0-dim tensor of `dtype` holding `value` on the device of `like`, a wrapped number as
/// PyTorch makes of a Python number (libtorch converts the value to `dtype` with its overflow
/// checks).
pub(crate) fn scalar_like(like: &tch::Tensor, value: Scalar, dtype: DType) -> Result<tch::Tensor> {
    let (tag, i, f) = tagged(value);
    // SAFETY: `like` is live for the call; out and err are valid (see `make`). DType codes are
    // c10's ScalarType numbers.
    make("scalar", |out, err, len| unsafe { tr_native_scalar_like(like.as_ptr().cast(), tag, i, f, dtype as c_int, out, err, len) })
}

/// `t ** exponent` as libtorch computes it for a Scalar exponent (its special exponents too).
pub(crate) fn pow(t: &tch::Tensor, exponent: Scalar) -> Result<tch::Tensor> {
    let (tag, i, f) = tagged(exponent);
    // SAFETY: `t` is live for the call; out and err are valid (see `make`).
    make("pow", |out, err, len| unsafe { tr_native_pow(t.as_ptr().cast(), tag, i, f, 0, out, err, len) })
}

/// `base ** t` as libtorch's Scalar overload computes it: a contiguous result, whatever `t`'s
/// layout, as PyTorch gives for `2 ** t`.
pub(crate) fn rpow(t: &tch::Tensor, base: Scalar) -> Result<tch::Tensor> {
    let (tag, i, f) = tagged(base);
    // SAFETY: `t` is live for the call; out and err are valid (see `make`).
    make("pow", |out, err, len| unsafe { tr_native_pow(t.as_ptr().cast(), tag, i, f, 2, out, err, len) })
}

/// `t **= exponent` (see `pow`).
pub(crate) fn pow_(t: &tch::Tensor, exponent: Scalar) -> Result<()> {
    let (tag, i, f) = tagged(exponent);
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `t` is live for the call; err is valid for ERR_LEN bytes; no tensor is made.
    let status = unsafe { tr_native_pow(t.as_ptr().cast(), tag, i, f, 1, std::ptr::null_mut(), err.as_mut_ptr(), ERR_LEN) };
    check("pow_", status, &err)
}

/// Values from `start` to `end` (exclusive) in steps of `step`, of `dtype`, on the CPU.
pub(crate) fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<tch::Tensor> {
    // SAFETY: out and err are valid (see `make`). DType codes are c10's ScalarType numbers.
    make("arange", |out, err, len| unsafe { tr_native_arange(start, end, step, dtype as c_int, out, err, len) })
}

/// Fills `t` in place with `value`, converted to its dtype as libtorch's `fill_` does.
pub(crate) fn fill(t: &tch::Tensor, value: Scalar) -> Result<()> {
    let (tag, i, f) = tagged(value);
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `t` is live for the call; err is valid for ERR_LEN bytes.
    let status = unsafe { tr_native_fill(t.as_ptr().cast(), tag, i, f, err.as_mut_ptr(), ERR_LEN) };
    check("fill", status, &err)
}

/// `t`'s sizes, strides and dtype on the meta device (no data): for device-placement checks.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn to_meta(t: &tch::Tensor) -> Result<tch::Tensor> {
    // SAFETY: as for `scalar_like`.
    make("to meta", |out, err, len| unsafe { tr_native_to_meta(t.as_ptr().cast(), out, err, len) })
}

/// Whether `t` is on the meta device (tch's `Device` cannot name it).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn is_meta(t: &tch::Tensor) -> bool {
    // SAFETY: `t` is live for the call.
    unsafe { tr_native_is_meta(t.as_ptr().cast()) != 0 }
}

// ---------------------------------------------------------------- storages (storage.cpp)

/// What the residency manager knows of the storage a tensor views (see storage.cpp).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StorageInfo {
    /// The StorageImpl's address: stable while any tensor views the storage.
    pub(crate) id: usize,
    pub(crate) nbytes: u64,
    /// 0 for a home without memory yet.
    has_memory: i32,
    external: i32,
    page_locked: i32,
    /// References to the StorageImpl (each tensor viewing it holds one).
    pub(crate) holders: i32,
}

impl StorageInfo {
    /// Code outside the library can reach the memory (a DLPack import or export).
    pub(crate) fn external(&self) -> bool {
        self.external != 0
    }
    pub(crate) fn page_locked(&self) -> bool {
        self.page_locked != 0
    }
}

#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_storage(t: *const c_void, cuda: c_int, out: *mut StorageInfo, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_storage_bytes(t: *const c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_view_on(holder: *const c_void, like: *const c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_alias_bytes(holder: *const c_void, offset: u64, nbytes: u64, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_lazy_home(like: *const c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_home_allocate(home: *const c_void, pinned: c_int, cuda: c_int, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_home_pin(home: *const c_void, cuda: c_int, out_old: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_copy_quiet(dst: *const c_void, src: *const c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_mark_external(t: *const c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_page_locked_empty(sizes: *const i64, ndim: usize, dtype: c_int, cuda: c_int, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_page_locked_allocations(cuda: c_int) -> u64;
    fn tr_native_tensor_holders(t: *const c_void) -> i32;
    fn tr_native_tensor_impl(t: *const c_void) -> usize;
    fn tr_native_memory_shared(t: *const c_void) -> c_int;
}

/// Runs a shim that makes nothing.
fn run(what: &str, call: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<()> {
    let mut err = [0 as c_char; ERR_LEN];
    check(what, call(err.as_mut_ptr(), ERR_LEN), &err)
}

/// The storage `t` views. `cuda`: CUDA's page-locked allocator is in use (only then can its
/// memory be recognised).
pub(crate) fn storage(t: &tch::Tensor, cuda: bool) -> Result<StorageInfo> {
    let mut info = StorageInfo::default();
    // SAFETY: `t` is live for the call; `info` is a valid out pointer.
    run("storage", |err, len| unsafe { tr_native_storage(t.as_ptr().cast(), cuda.into(), &mut info, err, len) })?;
    Ok(info)
}

/// How many handles (`tch::Tensor`s, libtorch's `at::Tensor`s) share `t`'s TensorImpl: two
/// registered tensors may be one (an op may return its input).
pub(crate) fn tensor_holders(t: &tch::Tensor) -> i32 {
    // SAFETY: `t` is live for the call; the shim reads a reference count.
    unsafe { tr_native_tensor_holders(t.as_ptr().cast()) }
}

/// Whether anything but `t` keeps its memory alive (another handle to its TensorImpl, another
/// TensorImpl over its storage): dropping `t` would free nothing yet.
pub(crate) fn memory_shared(t: &tch::Tensor) -> bool {
    // SAFETY: `t` is live for the call; the shim reads reference counts.
    unsafe { tr_native_memory_shared(t.as_ptr().cast()) != 0 }
}

/// The address of `t`'s TensorImpl: handles with the same one are one tensor (`is_same`) to
/// libtorch's overlap checks.
pub(crate) fn tensor_impl(t: &tch::Tensor) -> usize {
    // SAFETY: `t` is live for the call; the shim reads a pointer.
    unsafe { tr_native_tensor_impl(t.as_ptr().cast()) }
}

/// A 1-D uint8 tensor over the whole storage of `t`, on `t`'s device.
pub(crate) fn storage_bytes(t: &tch::Tensor) -> Result<tch::Tensor> {
    // SAFETY: `t` is live for the call.
    make("storage bytes", |out, err, len| unsafe { tr_native_storage_bytes(t.as_ptr().cast(), out, err, len) })
}

/// `like`'s dtype and geometry over the storage (and on the device) of `holder`.
pub(crate) fn view_on(holder: &tch::Tensor, like: &tch::Tensor) -> Result<tch::Tensor> {
    // SAFETY: both are live for the call.
    make("view", |out, err, len| unsafe { tr_native_view_on(holder.as_ptr().cast(), like.as_ptr().cast(), out, err, len) })
}

/// `nbytes` of `holder`'s storage from byte `offset` on, as a 1-D byte tensor over a storage of
/// its own that keeps `holder`'s alive (see storage.cpp).
pub(crate) fn alias_bytes(holder: &tch::Tensor, offset: usize, nbytes: u64) -> Result<tch::Tensor> {
    // SAFETY: `holder` is live for the call.
    make("alias", |out, err, len| unsafe { tr_native_alias_bytes(holder.as_ptr().cast(), offset as u64, nbytes, out, err, len) })
}

/// A host tensor shaped like `like` over a new storage of the same size with no memory yet.
pub(crate) fn lazy_home(like: &tch::Tensor) -> Result<tch::Tensor> {
    // SAFETY: `like` is live for the call.
    make("lazy home", |out, err, len| unsafe { tr_native_lazy_home(like.as_ptr().cast(), out, err, len) })
}

/// Gives the lazy storage of `home` memory: page-locked when `pinned` (CUDA's caching host
/// allocator, or the simulated device's), else libtorch's pageable memory.
pub(crate) fn home_allocate(home: &tch::Tensor, pinned: bool, cuda: bool) -> Result<()> {
    // SAFETY: `home` is live for the call.
    run("home", |err, len| unsafe { tr_native_home_allocate(home.as_ptr().cast(), pinned.into(), cuda.into(), err, len) })
}

/// Moves the storage of `home` into page-locked memory; returns the old memory, to be freed when
/// no reader can still be using it.
pub(crate) fn home_pin(home: &tch::Tensor, cuda: bool) -> Result<tch::Tensor> {
    // SAFETY: `home` is live for the call.
    make("page-locked home", |out, err, len| unsafe { tr_native_home_pin(home.as_ptr().cast(), cuda.into(), out, err, len) })
}

/// Copies `src` into `dst` without bumping autograd's version counter (the manager's copies are
/// not writes by the program).
pub(crate) fn copy_quiet(dst: &tch::Tensor, src: &tch::Tensor) -> Result<()> {
    // SAFETY: both are live for the call.
    run("copy", |err, len| unsafe { tr_native_copy_quiet(dst.as_ptr().cast(), src.as_ptr().cast(), err, len) })
}

/// Marks the storage of `t` as reachable from outside the library (before an export).
pub(crate) fn mark_external(t: &tch::Tensor) -> Result<()> {
    // SAFETY: `t` is live for the call.
    run("mark external", |err, len| unsafe { tr_native_mark_external(t.as_ptr().cast(), err, len) })
}

/// An uninitialised contiguous host tensor in page-locked memory.
pub(crate) fn page_locked_empty(shape: &[i64], dtype: DType, cuda: bool) -> Result<tch::Tensor> {
    // SAFETY: `shape` is valid for its length during the call; DType codes are c10's.
    make("page-locked tensor", |out, err, len| unsafe { tr_native_page_locked_empty(shape.as_ptr(), shape.len(), dtype as c_int, cuda.into(), out, err, len) })
}

/// How many times page-locked memory has had to be allocated (not served from the allocator's
/// cache): CUDA's caching host allocator's count (process-wide), or the simulated cache's.
pub(crate) fn page_locked_allocations(cuda: bool) -> u64 {
    // SAFETY: a plain call; the shim catches everything.
    unsafe { tr_native_page_locked_allocations(cuda.into()) }
}

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

/// The version of `t`'s data: autograd's version counter, bumped by every in-place write.
pub(crate) fn version(t: &tch::Tensor) -> u32 {
    // SAFETY: `t` is live for the call.
    unsafe { tr_native_version(t.as_ptr().cast()) }
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

// ---------------------------------------------------------------- random draws (random.cpp)

#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_dropout_noise(like: *const c_void, into: c_int, p: f64, snapshot: *const c_void, out_noise: *mut *mut c_void, out_snapshot: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_generator_free(generator: *mut c_void);
}

/// A random generator as it was before a draw (random.cpp): the same draw from it gives the same
/// numbers.
pub(crate) struct Snapshot(*mut c_void);

// SAFETY: the shim only ever clones the generator it points to (a read), and frees it once.
unsafe impl Send for Snapshot {}
// SAFETY: as for Send: shared use only reads it.
unsafe impl Sync for Snapshot {}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // SAFETY: made by tr_native_dropout_noise, freed only here.
        unsafe { tr_native_generator_free(self.0) }
    }
}

/// Dropout's noise for a tensor like `like` (1/(1-p) where a Bernoulli(1-p) draw succeeds, else
/// 0), drawn from the default generator of `like`'s device as at::dropout draws it; with `keep`,
/// returned with a snapshot of that generator as it was (none on the meta device, which draws
/// nothing).
pub(crate) fn dropout_noise(like: &tch::Tensor, p: f64, keep: bool) -> Result<(tch::Tensor, Option<Snapshot>)> {
    let mut taken = std::ptr::null_mut();
    let out_snapshot: *mut *mut c_void = if keep { &mut taken } else { std::ptr::null_mut() };
    // SAFETY: `like` is live for the call; `out_snapshot` is NULL or a valid out pointer.
    let noise = make("dropout noise", |out, err, len| unsafe { tr_native_dropout_noise(like.as_ptr().cast(), 0, p, std::ptr::null(), out, out_snapshot, err, len) })?;
    Ok((noise, (!taken.is_null()).then_some(Snapshot(taken))))
}

/// The noise `dropout_noise` drew with `snapshot` kept, drawn again for a tensor like `like`;
/// with `into`, into `like` itself.
pub(crate) fn dropout_noise_again(like: &tch::Tensor, into: bool, p: f64, snapshot: &Snapshot) -> Result<tch::Tensor> {
    // SAFETY: `like` and the snapshot are live for the call.
    make("dropout noise", |out, err, len| unsafe { tr_native_dropout_noise(like.as_ptr().cast(), c_int::from(into), p, snapshot.0, out, std::ptr::null_mut(), err, len) })
}

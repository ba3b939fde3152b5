//! Small device-generic kernels the Rust side cannot express through tch (kernels.cpp beside
//! this file): scalars made as PyTorch makes them, `pow` with libtorch's special exponents,
//! `fill_`, `arange`, and the meta device (tch's `Device` cannot name it).

use crate::dtype::DType;
use crate::shim::{check, make, Result, ERR_LEN};
use std::ffi::{c_char, c_double, c_int, c_void};

// The shims are internal: keep them out of the public header.
#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_scalar_like(like: *const c_void, tag: c_int, i: i64, f: c_double, kind: c_int, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_fill(t: *const c_void, tag: c_int, i: i64, f: c_double, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_to_meta(t: *const c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_is_meta(t: *const c_void) -> c_int;
    fn tr_native_new_storage_bytes(out: *const c_void, inputs: *const *const c_void, n: usize, bytes: *mut u64, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_pow(t: *const c_void, tag: c_int, i: i64, f: c_double, how: c_int, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_arange(start: c_double, end: c_double, step: c_double, kind: c_int, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
}

/// A scalar as the shims take it: a tag (0 int, 1 float, 2 bool) and its int and float slots
/// (`Scalar::tagged`).
pub(crate) type Tagged = (c_int, i64, c_double);

/// A 0-dim tensor of `dtype` holding `value` on the device of `like`, a wrapped number as
/// PyTorch makes of a Python number (libtorch converts the value to `dtype` with its overflow
/// checks).
pub(crate) fn scalar_like(like: &tch::Tensor, value: Tagged, dtype: DType) -> Result<tch::Tensor> {
    let (tag, i, f) = value;
    // SAFETY: `like` is live for the call; out and err are valid (see `make`). DType codes are
    // c10's ScalarType numbers.
    make("scalar", |out, err, len| unsafe { tr_native_scalar_like(like.as_ptr().cast(), tag, i, f, dtype as c_int, out, err, len) })
}

/// `t ** exponent` as libtorch computes it for a Scalar exponent (its special exponents too).
pub(crate) fn pow(t: &tch::Tensor, exponent: Tagged) -> Result<tch::Tensor> {
    let (tag, i, f) = exponent;
    // SAFETY: `t` is live for the call; out and err are valid (see `make`).
    make("pow", |out, err, len| unsafe { tr_native_pow(t.as_ptr().cast(), tag, i, f, 0, out, err, len) })
}

/// `base ** t` as libtorch's Scalar overload computes it: a contiguous result, whatever `t`'s
/// layout, as PyTorch gives for `2 ** t`.
pub(crate) fn rpow(t: &tch::Tensor, base: Tagged) -> Result<tch::Tensor> {
    let (tag, i, f) = base;
    // SAFETY: `t` is live for the call; out and err are valid (see `make`).
    make("pow", |out, err, len| unsafe { tr_native_pow(t.as_ptr().cast(), tag, i, f, 2, out, err, len) })
}

/// `t **= exponent` (see `pow`).
pub(crate) fn pow_(t: &tch::Tensor, exponent: Tagged) -> Result<()> {
    let (tag, i, f) = exponent;
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
pub(crate) fn fill(t: &tch::Tensor, value: Tagged) -> Result<()> {
    let (tag, i, f) = value;
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `t` is live for the call; err is valid for ERR_LEN bytes.
    let status = unsafe { tr_native_fill(t.as_ptr().cast(), tag, i, f, err.as_mut_ptr(), ERR_LEN) };
    check("fill", status, &err)
}

/// `t`'s sizes, strides and dtype on the meta device (no data).
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

/// The bytes of `out`'s storage, or 0 where it is the storage of one of `inputs` (a view of an
/// input, or the input itself) or `out` is undefined.
pub(crate) fn new_storage_bytes<'a>(out: &tch::Tensor, inputs: impl Iterator<Item = &'a tch::Tensor>) -> Result<u64> {
    let inputs: Vec<*const c_void> = inputs.map(|t| t.as_ptr().cast()).collect();
    let mut bytes = 0;
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `out` and each of `inputs` are live for the call; `bytes` and err are valid.
    let status = unsafe { tr_native_new_storage_bytes(out.as_ptr().cast(), inputs.as_ptr(), inputs.len(), &mut bytes, err.as_mut_ptr(), ERR_LEN) };
    check("output bytes", status, &err).map(|()| bytes)
}

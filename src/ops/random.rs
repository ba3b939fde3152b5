//! Random ops the residency manager can make again exactly. Under a manager that keeps recipes a
//! draw keeps a snapshot of the generator it drew from (src/ops/random.cpp), and its result's
//! recipe draws the same numbers from that snapshot again, so a result may be dropped like any
//! other rather than written back; elsewhere it draws from the default generator directly.
//! Dropout is at::dropout's own composition on every device (noise drawn, scaled, multiplied in),
//! so a seeded run gives the same values with a manager as without one; the noise autograd saves
//! for backward gets a recipe too. (On CUDA, PyTorch's own dropout is one fused kernel with a
//! one-byte mask: the same distribution, other numbers.)

use super::exec::{given, replay_args};
use crate::error::Result;
use crate::residency::{self, Replay};
use crate::shim::{make, Result as ShimResult};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

/// Dropout in training: the result, and with `keep` (a manager keeps recipes) the replay that
/// makes it again from its input.
pub(crate) fn dropout(a: &tch::Tensor, p: f64, train: bool, keep: bool) -> Result<(tch::Tensor, Option<Replay>)> {
    if !(train && p > 0.0 && p < 1.0) || a.numel() == 0 {
        return Ok((a.f_dropout(p, train)?, None));
    }
    let (noise, snapshot) = dropout_noise(a, p, keep)?;
    let out = a.f_mul(&noise)?;
    let Some(snapshot) = snapshot.map(Arc::new) else { return Ok((out, None)) }; // not kept, or meta
    residency::keep_saved_recipe(&noise, "dropout_noise", noise_again(&noise, p, snapshot.clone()))?;
    let replay: Replay = Arc::new(move |inputs| {
        let [a] = replay_args(inputs)?;
        let a = given(a)?;
        Ok(a.f_mul(&dropout_noise_again(a, false, p, &snapshot)?)?)
    });
    Ok((out, Some(replay)))
}

/// The replay of dropout's noise alone: the same draw into a tensor of its size and strides.
fn noise_again(noise: &tch::Tensor, p: f64, snapshot: Arc<Snapshot>) -> Replay {
    let (size, stride, options) = (noise.size(), noise.stride(), (noise.kind(), noise.device()));
    Arc::new(move |_| {
        let noise = tch::Tensor::f_empty_strided(&size, &stride, options)?;
        Ok(dropout_noise_again(&noise, true, p, &snapshot)?)
    })
}

// ---------------------------------------------------------------- draws (random.cpp)

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
pub(crate) fn dropout_noise(like: &tch::Tensor, p: f64, keep: bool) -> ShimResult<(tch::Tensor, Option<Snapshot>)> {
    let mut taken = std::ptr::null_mut();
    let out_snapshot: *mut *mut c_void = if keep { &mut taken } else { std::ptr::null_mut() };
    // SAFETY: `like` is live for the call; `out_snapshot` is NULL or a valid out pointer.
    let noise = make("dropout noise", |out, err, len| unsafe { tr_native_dropout_noise(like.as_ptr().cast(), 0, p, std::ptr::null(), out, out_snapshot, err, len) })?;
    Ok((noise, (!taken.is_null()).then_some(Snapshot(taken))))
}

/// The noise `dropout_noise` drew with `snapshot` kept, drawn again for a tensor like `like`;
/// with `into`, into `like` itself.
pub(crate) fn dropout_noise_again(like: &tch::Tensor, into: bool, p: f64, snapshot: &Snapshot) -> ShimResult<tch::Tensor> {
    // SAFETY: `like` and the snapshot are live for the call.
    make("dropout noise", |out, err, len| unsafe { tr_native_dropout_noise(like.as_ptr().cast(), c_int::from(into), p, snapshot.0, out, std::ptr::null_mut(), err, len) })
}

//! Random ops the residency manager can make again exactly. Under a manager that keeps recipes a
//! draw keeps a snapshot of the generator it drew from (src/native/random.cpp), and its result's
//! recipe draws the same numbers from that snapshot again, so a result may be dropped like any
//! other rather than written back; elsewhere it draws from the default generator directly.
//! Dropout is at::dropout's own composition on every device (noise drawn, scaled, multiplied in),
//! so a seeded run gives the same values with a manager as without one; the noise autograd saves
//! for backward gets a recipe too. (On CUDA, PyTorch's own dropout is one fused kernel with a
//! one-byte mask: the same distribution, other numbers.)

use super::exec::{given, replay_args};
use crate::error::Result;
use crate::native::{self, Snapshot};
use crate::residency::{self, Replay};
use std::sync::Arc;

/// Dropout in training: the result, and with `keep` (a manager keeps recipes) the replay that
/// makes it again from its input.
pub(crate) fn dropout(a: &tch::Tensor, p: f64, train: bool, keep: bool) -> Result<(tch::Tensor, Option<Replay>)> {
    if !(train && p > 0.0 && p < 1.0) || a.numel() == 0 {
        return Ok((a.f_dropout(p, train)?, None));
    }
    let (noise, snapshot) = native::dropout_noise(a, p, keep)?;
    let out = a.f_mul(&noise)?;
    let Some(snapshot) = snapshot.map(Arc::new) else { return Ok((out, None)) }; // not kept, or meta
    residency::keep_saved_recipe(&noise, "dropout_noise", noise_again(&noise, p, snapshot.clone()))?;
    let replay: Replay = Arc::new(move |inputs| {
        let [a] = replay_args(inputs)?;
        let a = given(a)?;
        Ok(a.f_mul(&native::dropout_noise_again(a, false, p, &snapshot)?)?)
    });
    Ok((out, Some(replay)))
}

/// The replay of dropout's noise alone: the same draw into a tensor of its size and strides.
fn noise_again(noise: &tch::Tensor, p: f64, snapshot: Arc<Snapshot>) -> Replay {
    let (size, stride, options) = (noise.size(), noise.stride(), (noise.kind(), noise.device()));
    Arc::new(move |_| {
        let noise = tch::Tensor::f_empty_strided(&size, &stride, options)?;
        Ok(native::dropout_noise_again(&noise, true, p, &snapshot)?)
    })
}

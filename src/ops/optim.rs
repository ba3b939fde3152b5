//! Optimizer steps over sets of parameters, in place and without gradient tracking. Stateless:
//! Adam's moment buffers belong to the caller, so no optimizer object crosses the C ABI. The op
//! table runs them one parameter at a time (checking that the lists have one length), so under
//! a residency manager one parameter, its gradient and its moments need room at a time.

use super::scalars::scalar;
use crate::error::{Error, Result};

pub(crate) fn sgd_step(params: &[&tch::Tensor], lr: f64) -> Result<()> {
    let _no_grad = tch::no_grad_guard();
    for p in params {
        let grad = p.f_grad()?;
        if grad.defined() {
            let _ = p.shallow_clone().f_sub_(&grad.f_mul(&scalar(&grad, lr)?)?)?;
        }
    }
    Ok(())
}

pub(crate) struct AdamHyper {
    pub(crate) lr: f64,
    pub(crate) beta1: f64,
    pub(crate) beta2: f64,
    pub(crate) eps: f64,
    pub(crate) weight_decay: f64,
}

/// torch.optim.Adam's update (amsgrad off), with `step` counted from 1.
pub(crate) fn adam_step(
    params: &[&tch::Tensor],
    exp_avg: &[&tch::Tensor],
    exp_avg_sq: &[&tch::Tensor],
    step: i64,
    h: AdamHyper,
) -> Result<()> {
    if step < 1 {
        return Err(Error::InvalidArg(format!("adam_step: step is counted from 1, got {step}")));
    }
    let _no_grad = tch::no_grad_guard();
    let bias1 = 1.0 - h.beta1.powi(step as i32);
    let bias2_sqrt = (1.0 - h.beta2.powi(step as i32)).sqrt();
    for ((p, m), v) in params.iter().zip(exp_avg).zip(exp_avg_sq) {
        let mut grad = p.f_grad()?;
        if !grad.defined() {
            continue;
        }
        if h.weight_decay != 0.0 {
            grad = grad.f_add(&p.f_mul(&scalar(p, h.weight_decay)?)?)?;
        }
        let _ = m.shallow_clone().f_mul_(&scalar(m, h.beta1)?)?.f_add_(&grad.f_mul(&scalar(&grad, 1.0 - h.beta1)?)?)?;
        let _ = v.shallow_clone().f_mul_(&scalar(v, h.beta2)?)?.f_addcmul_(&grad, &grad.f_mul(&scalar(&grad, 1.0 - h.beta2)?)?)?;
        // In place on the temporaries (the same kernels, so the same bits): at most two of the
        // parameter's size are alive at once.
        let denom = v.f_sqrt()?;
        let _ = denom.shallow_clone().f_div_(&scalar(v, bias2_sqrt)?)?.f_add_(&scalar(v, h.eps)?)?;
        let update = m.f_div(&denom)?;
        drop(denom);
        let _ = update.shallow_clone().f_mul_(&scalar(m, h.lr / bias1)?)?;
        let _ = p.shallow_clone().f_sub_(&update)?;
    }
    Ok(())
}

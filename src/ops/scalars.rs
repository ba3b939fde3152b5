//! Scalar arguments without tch's `Scalar`: tch 0.24 frees a temporary `Scalar` after the
//! libtorch call and before reading libtorch's error, and the free panics when an error is
//! pending (bad shape, wrong dtype). So scalars reach libtorch as 0-dim tensors, typed so that
//! the result's dtype is what PyTorch gives for a Python float: a 0-dim f64 never widens a
//! floating tensor (0-dim tensors do not promote within a category), and an integer or bool
//! tensor meets a 0-dim f32, the default float dtype, as it would meet a Python float.

use super::prelude::*;

/// `v` as a 0-dim tensor to combine with `with` like a Python float scalar, on `with`'s device
/// (libtorch accepts a CPU 0-dim tensor beside a CUDA one only as a wrapped number in arithmetic,
/// not as, say, clamp's bounds).
pub(crate) fn scalar(with: &tch::Tensor, v: f64) -> Result<tch::Tensor, tch::TchError> {
    let floating = matches!(with.f_kind()?, Kind::Half | Kind::BFloat16 | Kind::Float | Kind::Double);
    crate::native::scalar_like(with, v, if floating { DType::F64 } else { DType::F32 })
}

pub(crate) fn full(shape: &[i64], value: f64, dtype: DType) -> Result<tch::Tensor> {
    let mut t = tch::Tensor::f_empty(shape, opts(dtype))?;
    let value = scalar(&t, value)?;
    t.f_copy_(&value)?;
    Ok(t)
}

/// Checked first: libtorch's own checks would fail inside tch's `Scalar` (see above).
pub(crate) fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<tch::Tensor> {
    let why = if !(start.is_finite() && end.is_finite() && step.is_finite()) {
        "start, end and step must be finite"
    } else if step == 0.0 {
        "step must be nonzero"
    } else if (end - start) / step < 0.0 {
        "step sign does not lead from start to end"
    } else {
        return Ok(tch::Tensor::f_arange_start_step(start, end, step, opts(dtype))?);
    };
    Err(Error::InvalidArg(format!("arange({start}, {end}, {step}): {why}")))
}

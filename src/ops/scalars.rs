//! Scalar arguments without tch's `Scalar`: tch 0.24 frees a temporary `Scalar` after the
//! libtorch call and before reading libtorch's error, and the free panics when an error is
//! pending (bad shape, wrong dtype). So scalars reach libtorch as 0-dim f64 tensors, which take
//! part in type promotion exactly like scalars (a 0-dim tensor never widens a same-category dtype).

use super::prelude::*;

/// `v` as a 0-dim f64 tensor.
pub(crate) fn scalar(v: f64) -> tch::Tensor {
    tch::Tensor::f_from_data_size(&v.to_ne_bytes(), &[], Kind::Double).expect("a 0-dim tensor from 8 bytes")
}

pub(crate) fn full(shape: &[i64], value: f64, dtype: DType) -> Result<tch::Tensor> {
    let mut t = tch::Tensor::f_empty(shape, opts(dtype))?;
    t.f_copy_(&scalar(value))?;
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

//! Scalar arguments: typed as PyTorch types a Python number, and passed without tch's `Scalar`.
//!
//! A [`Scalar`] keeps its kind (integer, floating, bool), so `int_tensor + 1` stays an integer
//! tensor and `full([1], 2^62 + 1, I64)` is exact. tch 0.24 frees a temporary `Scalar` after the
//! libtorch call and before reading libtorch's error, and the free panics when an error is
//! pending (bad shape, wrong dtype), so scalars reach libtorch as 0-dim tensors made by a C++
//! shim and marked, as PyTorch marks a Python number, a "wrapped number": it changes the result's
//! dtype only when its category (bool < integer < floating) is higher than every tensor
//! operand's, 0-dim tensors included. So an integer scalar is a wrapped int64 (an int32 tensor
//! stays int32, a bool tensor becomes int64, a floating tensor keeps its dtype), a float is a
//! wrapped float64 beside a floating tensor (never widens it, a 0-dim float32 either) and a
//! float32, the default float dtype, beside an integer or bool tensor, and a bool is a bool.

use super::kernels;
use tch::Kind;
use crate::dtype::DType;
use crate::error::{Error, Result};

/// A scalar argument of an op, which keeps its type (PyTorch's `Scalar`): an integer, a
/// floating-point number or a bool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// `Scalar::from` for each Rust number type: its kind follows the type.
macro_rules! scalar_from {
    ($($ty:ty => $kind:ident),*) => {$(
        impl From<$ty> for Scalar {
            fn from(v: $ty) -> Self {
                Scalar::$kind(v.into())
            }
        }
    )*};
}

scalar_from!(f64 => Float, f32 => Float, i64 => Int, i32 => Int, bool => Bool);

impl Scalar {
    /// The scalar as the C++ shims take it (`kernels::Tagged`).
    pub(crate) fn tagged(self) -> kernels::Tagged {
        match self {
            Scalar::Int(i) => (0, i, 0.0),
            Scalar::Float(f) => (1, 0, f),
            Scalar::Bool(b) => (2, i64::from(b), 0.0),
        }
    }
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Int(v) => write!(f, "{v}"),
            Scalar::Float(v) => write!(f, "{v:?}"),
            Scalar::Bool(v) => write!(f, "{v}"),
        }
    }
}

fn is_floating(kind: Kind) -> bool {
    matches!(kind, Kind::Half | Kind::BFloat16 | Kind::Float | Kind::Double)
}

/// `v` as a 0-dim tensor to combine with `with` as PyTorch combines a Python number (see the
/// module doc), on `with`'s device (libtorch accepts a CPU 0-dim tensor beside a CUDA one only
/// as a wrapped number in arithmetic, not as, say, clamp's bounds).
pub(crate) fn scalar(with: &tch::Tensor, v: impl Into<Scalar>) -> Result<tch::Tensor, tch::TchError> {
    let v = v.into();
    let dtype = match v {
        Scalar::Int(_) => DType::I64,
        Scalar::Float(_) if is_floating(with.f_kind()?) => DType::F64,
        Scalar::Float(_) => DType::F32,
        Scalar::Bool(_) => DType::Bool,
    };
    kernels::scalar_like(with, v.tagged(), dtype)
}

/// The range of an integer dtype, None for the others.
fn integer_range(dtype: DType) -> Option<(i64, i64)> {
    Some(match dtype {
        DType::U8 => (0, u8::MAX.into()),
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::I64 => (i64::MIN, i64::MAX),
        _ => return None,
    })
}

/// Checks that `value` fits an integer dtype (a float is truncated toward zero as libtorch
/// converts it; infinities, NaN and out-of-range values are refused).
pub(crate) fn check_fits(what: &str, value: Scalar, dtype: DType) -> Result<()> {
    let Some((lo, hi)) = integer_range(dtype) else { return Ok(()) };
    let fits = match value {
        Scalar::Int(v) => (lo..=hi).contains(&v),
        // hi + 1 is a power of two, exact as an f64; -2^63 (lo of I64) is exact too.
        Scalar::Float(v) => v.is_finite() && v.trunc() >= lo as f64 && v.trunc() < hi as f64 + 1.0,
        Scalar::Bool(_) => true,
    };
    match fits {
        true => Ok(()),
        false => Err(Error::InvalidArg(format!("{what}: {value} does not fit in {dtype:?} (range {lo}..={hi})"))),
    }
}

pub(crate) fn full(shape: &[i64], value: Scalar, dtype: DType) -> Result<tch::Tensor> {
    check_fits("full", value, dtype)?;
    let t = tch::Tensor::f_empty(shape, (dtype.kind(), tch::Device::Cpu))?;
    kernels::fill(&t, value.tagged())?;
    Ok(t)
}

/// Fills `a` in place with `value` (Tensor.fill_), which must fit `a`'s dtype.
pub(crate) fn fill_(a: &tch::Tensor, value: Scalar) -> Result<()> {
    check_fits("fill_", value, DType::from_kind(a.f_kind()?)?)?;
    Ok(kernels::fill(a, value.tagged())?)
}

/// `a ** exponent` with libtorch's Scalar kernel, as PyTorch computes `t ** 2` (a square, not the
/// general power: the last bit differs), through a shim; an integer tensor raised to a negative
/// integer is refused with our words first.
pub(crate) fn pow(a: &tch::Tensor, exponent: Scalar) -> Result<tch::Tensor> {
    check_pow(a, exponent)?;
    Ok(kernels::pow(a, exponent.tagged())?)
}

/// `a **= exponent` (see `pow`).
pub(crate) fn pow_(a: &tch::Tensor, exponent: Scalar) -> Result<()> {
    check_pow(a, exponent)?;
    Ok(kernels::pow_(a, exponent.tagged())?)
}

/// `base ** a` (see `kernels::rpow`).
pub(crate) fn rpow(a: &tch::Tensor, base: Scalar) -> Result<tch::Tensor, tch::TchError> {
    kernels::rpow(a, base.tagged())
}

fn check_pow(a: &tch::Tensor, exponent: Scalar) -> Result<()> {
    let dtype = DType::from_kind(a.f_kind()?)?;
    let integer = dtype == DType::Bool || integer_range(dtype).is_some();
    match (integer, exponent) {
        (true, Scalar::Int(e)) if e < 0 => Err(Error::InvalidArg(format!(
            "pow: integers to negative integer powers are not allowed ({e}); convert the tensor to a floating dtype first"
        ))),
        _ => Ok(()),
    }
}

/// Through a C++ shim, not tch's `Scalar` (see above): libtorch's checks of the bounds, the
/// step, the size and the dtype are errors like any other.
pub(crate) fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<tch::Tensor> {
    Ok(kernels::arange(start, end, step, dtype)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_do_not_fit_an_integer_dtype_are_refused() {
        assert!(check_fits("t", Scalar::Int(i64::MAX), DType::I64).is_ok());
        assert!(check_fits("t", Scalar::Float(-9.223_372_036_854_776e18), DType::I64).is_ok());
        assert!(check_fits("t", Scalar::Float(9.223_372_036_854_776e18), DType::I64).is_err());
        assert!(check_fits("t", Scalar::Float(f64::INFINITY), DType::I64).is_err());
        assert!(check_fits("t", Scalar::Float(f64::NAN), DType::I32).is_err());
        assert!(check_fits("t", Scalar::Int(256), DType::U8).is_err());
        assert!(check_fits("t", Scalar::Float(255.9), DType::U8).is_ok());
        assert!(check_fits("t", Scalar::Float(-0.5), DType::U8).is_ok());
        assert!(check_fits("t", Scalar::Float(f64::INFINITY), DType::F32).is_ok());
        assert!(check_fits("t", Scalar::Int(7), DType::Bool).is_ok());
    }
}

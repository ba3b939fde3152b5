//! The C types: one distinct handle struct per handle kind, dtype codes, typed scalars,
//! statistics.

use crate::error::{Error, Result};
use tensorref_derive::CEnum;
use crate::ops::Scalar;
use crate::registry::{ScopeId, TensorId};
use crate::scope::Stats;

/// A tensor handle. 0 is never valid; releasing it is a no-op.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrTensor {
    pub id: u64,
}

/// A scope handle. 0 is never valid.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrScope {
    pub id: u64,
}

/// A `tr_dtype` (`enum tr_dtype` in the header, `crate::DType` here) as it crosses the ABI: an
/// `int32_t`, since a C caller may pass any value; `DType::try_from` checks it.
/// cbindgen:ignore
pub type TrDtype = i32;

/// Which member of a `tr_scalar` holds its value.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, CEnum)]
#[c_enum(what = "scalar kind")]
pub enum ScalarKind {
    /// An integer, in `i`.
    Int = 0,
    /// A floating-point number, in `f`.
    Float = 1,
    /// A bool, in `b`.
    Bool = 2,
}

/// A `tr_scalar_kind` as it crosses the ABI (`ScalarKind::try_from` checks it).
/// cbindgen:ignore
pub type TrScalarKind = i32;

/// A scalar that keeps its type, as a Python number does: `kind` says which member holds the
/// value (TR_SCALAR_KIND_INT: `i`, TR_SCALAR_KIND_FLOAT: `f`, TR_SCALAR_KIND_BOOL: `b`); the
/// others are ignored. Ops promote it with the tensor as PyTorch promotes a Python number: an
/// integer keeps an integer tensor's dtype (`int32_tensor + 1` is int32) and is exact to 64 bits,
/// a float makes an integer or bool tensor float32 and never widens a floating one. In C:
/// `tr_scalar_int(1)`, `tr_scalar_float(0.5)`, `tr_scalar_bool(true)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrScalar {
    pub kind: TrScalarKind,
    pub i: i64,
    pub f: f64,
    pub b: bool,
}

impl TrScalar {
    /// The value, or TR_ERR_INVALID_ARG for an unknown kind.
    pub(crate) fn parse(self, name: &str) -> Result<Scalar> {
        match ScalarKind::try_from(self.kind) {
            Ok(ScalarKind::Int) => Ok(Scalar::Int(self.i)),
            Ok(ScalarKind::Float) => Ok(Scalar::Float(self.f)),
            Ok(ScalarKind::Bool) => Ok(Scalar::Bool(self.b)),
            Err(Error::InvalidArg(why)) => Err(Error::InvalidArg(format!("`{name}`: {why}"))),
            Err(e) => Err(e),
        }
    }
}

impl From<Scalar> for TrScalar {
    fn from(s: Scalar) -> Self {
        let zero = TrScalar { kind: ScalarKind::Int as i32, i: 0, f: 0.0, b: false };
        match s {
            Scalar::Int(i) => TrScalar { i, ..zero },
            Scalar::Float(f) => TrScalar { kind: ScalarKind::Float as i32, f, ..zero },
            Scalar::Bool(b) => TrScalar { kind: ScalarKind::Bool as i32, b, ..zero },
        }
    }
}

/// Per-thread scope statistics; counters only grow (see docs/dispose-scopes.md).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrStats {
    pub created_outside_scope: u64,
    pub disposed_outside_scope: u64,
    pub created_in_scope: u64,
    pub disposed_in_scope: u64,
    pub attached_to_scope: u64,
    pub detached_from_scope: u64,
    /// (created_in - disposed_in) + (created_outside - disposed_outside).
    pub live: i64,
}

impl From<Stats> for TrStats {
    fn from(s: Stats) -> Self {
        TrStats {
            created_outside_scope: s.created_outside_scope,
            disposed_outside_scope: s.disposed_outside_scope,
            created_in_scope: s.created_in_scope,
            disposed_in_scope: s.disposed_in_scope,
            attached_to_scope: s.attached_to_scope,
            detached_from_scope: s.detached_from_scope,
            live: s.live(),
        }
    }
}

impl From<TrTensor> for TensorId {
    fn from(t: TrTensor) -> Self {
        TensorId(t.id)
    }
}

impl From<TensorId> for TrTensor {
    fn from(t: TensorId) -> Self {
        TrTensor { id: t.0 }
    }
}

impl From<TrScope> for ScopeId {
    fn from(s: TrScope) -> Self {
        ScopeId(s.id)
    }
}

impl From<ScopeId> for TrScope {
    fn from(s: ScopeId) -> Self {
        TrScope { id: s.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn dtype_codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::try_from(d as i32).unwrap(), d);
        }
        assert!(matches!(DType::try_from(9), Err(Error::InvalidArg(m)) if m == "unknown dtype code 9"));
    }

    #[test]
    fn scalars_round_trip_and_unknown_kinds_are_refused() {
        for s in [Scalar::Int(i64::MIN), Scalar::Float(-0.5), Scalar::Bool(true)] {
            assert_eq!(TrScalar::from(s).parse("s").unwrap(), s);
        }
        let bad = TrScalar { kind: 7, ..TrScalar::from(Scalar::Int(1)) };
        assert!(matches!(bad.parse("s"), Err(Error::InvalidArg(m)) if m.contains("unknown scalar kind 7")));
    }
}

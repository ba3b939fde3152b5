//! The C types: one distinct handle struct per handle kind, dtype codes, typed scalars,
//! statistics.

use crate::error::{Error, Result};
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

/// An element type: one of the TR_DTYPE_* codes (c10's ScalarType numbers).
pub type TrDtype = i32;
pub const TR_DTYPE_U8: TrDtype = 0;
pub const TR_DTYPE_I8: TrDtype = 1;
pub const TR_DTYPE_I16: TrDtype = 2;
pub const TR_DTYPE_I32: TrDtype = 3;
pub const TR_DTYPE_I64: TrDtype = 4;
pub const TR_DTYPE_F16: TrDtype = 5;
pub const TR_DTYPE_F32: TrDtype = 6;
pub const TR_DTYPE_F64: TrDtype = 7;
pub const TR_DTYPE_BOOL: TrDtype = 11;
pub const TR_DTYPE_BF16: TrDtype = 15;

/// `tr_scalar.kind`: which member holds the value.
pub const TR_SCALAR_INT: i32 = 0;
pub const TR_SCALAR_FLOAT: i32 = 1;
pub const TR_SCALAR_BOOL: i32 = 2;

/// A scalar that keeps its type, as a Python number does: `kind` says which member holds the
/// value (TR_SCALAR_INT: `i`, TR_SCALAR_FLOAT: `f`, TR_SCALAR_BOOL: `b`); the others are
/// ignored. Ops promote it with the tensor as PyTorch promotes a Python number: an integer keeps
/// an integer tensor's dtype (`int32_tensor + 1` is int32) and is exact to 64 bits, a float
/// makes an integer or bool tensor float32 and never widens a floating one. In C:
/// `(tr_scalar){.kind = TR_SCALAR_INT, .i = 1}`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrScalar {
    pub kind: i32,
    pub i: i64,
    pub f: f64,
    pub b: bool,
}

impl TrScalar {
    /// The value, or TR_ERR_INVALID_ARG for an unknown kind.
    pub(crate) fn parse(self, name: &str) -> Result<Scalar> {
        match self.kind {
            TR_SCALAR_INT => Ok(Scalar::Int(self.i)),
            TR_SCALAR_FLOAT => Ok(Scalar::Float(self.f)),
            TR_SCALAR_BOOL => Ok(Scalar::Bool(self.b)),
            k => Err(Error::InvalidArg(format!(
                "`{name}`: unknown scalar kind {k} (TR_SCALAR_INT, TR_SCALAR_FLOAT or TR_SCALAR_BOOL)"
            ))),
        }
    }
}

impl From<Scalar> for TrScalar {
    fn from(s: Scalar) -> Self {
        let zero = TrScalar { kind: TR_SCALAR_INT, i: 0, f: 0.0, b: false };
        match s {
            Scalar::Int(i) => TrScalar { i, ..zero },
            Scalar::Float(f) => TrScalar { kind: TR_SCALAR_FLOAT, f, ..zero },
            Scalar::Bool(b) => TrScalar { kind: TR_SCALAR_BOOL, b, ..zero },
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
    fn dtype_codes_match_the_rust_enum() {
        let codes = [TR_DTYPE_U8, TR_DTYPE_I8, TR_DTYPE_I16, TR_DTYPE_I32, TR_DTYPE_I64,
                     TR_DTYPE_F16, TR_DTYPE_F32, TR_DTYPE_F64, TR_DTYPE_BOOL, TR_DTYPE_BF16];
        assert_eq!(codes.map(|c| DType::from_code(c).unwrap()), DType::ALL);
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

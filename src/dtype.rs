//! Element types. The codes are c10's `ScalarType` numbers, so they match PyTorch and DLPack
//! tooling; the C ABI has them as `enum tr_dtype` and validates them on entry.

use crate::error::{Error, Result};
use tch::Kind;
use tensorref_derive::CEnum;

/// Element type of a tensor (c10's ScalarType numbers).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, CEnum)]
#[c_enum(what = "dtype code")]
pub enum DType {
    /// 8-bit unsigned integer.
    U8 = 0,
    /// 8-bit signed integer.
    I8 = 1,
    /// 16-bit signed integer.
    I16 = 2,
    /// 32-bit signed integer.
    I32 = 3,
    /// 64-bit signed integer.
    I64 = 4,
    /// IEEE half precision.
    F16 = 5,
    /// IEEE single precision.
    F32 = 6,
    /// IEEE double precision.
    F64 = 7,
    /// Boolean, one byte.
    Bool = 11,
    /// bfloat16.
    BF16 = 15,
}

impl DType {
    /// Parses a C `tr_dtype` code.
    pub fn from_code(code: i32) -> Result<DType> {
        DType::try_from(code)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        self.kind().elt_size_in_bytes()
    }

    pub(crate) fn kind(self) -> Kind {
        match self {
            DType::U8 => Kind::Uint8,
            DType::I8 => Kind::Int8,
            DType::I16 => Kind::Int16,
            DType::I32 => Kind::Int,
            DType::I64 => Kind::Int64,
            DType::F16 => Kind::Half,
            DType::F32 => Kind::Float,
            DType::F64 => Kind::Double,
            DType::Bool => Kind::Bool,
            DType::BF16 => Kind::BFloat16,
        }
    }

    pub(crate) fn from_kind(kind: Kind) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.kind() == kind)
            .ok_or_else(|| Error::Dtype(format!("{kind:?} tensors are not supported by libtensorref")))
    }
}

/// Host element types that can be copied in and out of tensors from Rust.
pub trait Element: Copy + Default + 'static {
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => { $(impl Element for $t { const DTYPE: DType = DType::$d; })* };
}
element!(u8 => U8, i8 => I8, i16 => I16, i32 => I32, i64 => I64, f32 => F32, f64 => F64, bool => Bool);

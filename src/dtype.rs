//! Element types. The codes are c10's `ScalarType` numbers, so they match PyTorch and DLPack
//! tooling; the C ABI passes them as `tr_dtype` (an `int32_t`) and validates them on entry.

use crate::error::{Error, Result};
use tch::Kind;

/// Element type of a tensor.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    U8 = 0,
    I8 = 1,
    I16 = 2,
    I32 = 3,
    I64 = 4,
    F16 = 5,
    F32 = 6,
    F64 = 7,
    Bool = 11,
    BF16 = 15,
}

impl DType {
    pub const ALL: [DType; 10] = [
        DType::U8, DType::I8, DType::I16, DType::I32, DType::I64,
        DType::F16, DType::F32, DType::F64, DType::Bool, DType::BF16,
    ];

    /// Parses a C `tr_dtype` code.
    pub fn from_code(code: i32) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| *d as i32 == code)
            .ok_or_else(|| Error::InvalidArg(format!("unknown dtype code {code}")))
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

//! `+ - * /` and unary `-` on `&Tensor`, with tensors, f64 or i64 (which keeps an integer
//! tensor's dtype, as in PyTorch) on the right. Operators cannot
//! return a `Result`, so they panic with the error's message (as tch's do); the methods
//! (`add`, `mul_scalar`, ...) are the fallible forms.

use crate::tensor::Tensor;
use std::ops::{Add, Div, Mul, Neg, Sub};

macro_rules! binary {
    ($($trait:ident $method:ident $tensor_op:ident $scalar_op:ident),*) => {$(
        impl $trait<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                self.$tensor_op(rhs).unwrap_or_else(|e| panic!("{}: {e}", stringify!($tensor_op)))
            }
        }
        binary!(@scalar $trait $method $scalar_op f64);
        binary!(@scalar $trait $method $scalar_op i64);
    )*};
    (@scalar $trait:ident $method:ident $scalar_op:ident $ty:ty) => {
        impl $trait<$ty> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: $ty) -> Tensor {
                self.$scalar_op(rhs).unwrap_or_else(|e| panic!("{}: {e}", stringify!($scalar_op)))
            }
        }
    };
}

binary!(Add add add add_scalar, Sub sub sub sub_scalar, Mul mul mul mul_scalar, Div div div div_scalar);

impl Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(self).unwrap_or_else(|e| panic!("neg: {e}"))
    }
}

//! Tensor operations. Every op is an op of the table, from which `tools/gen.py` generates the
//! core function on handles, the `Tensor` method and the C function: about 120 are lines of
//! `ops.def` (44 of which only name and document a schema overload: body `schema`), and the
//! public overloads of libtorch's own schema are the rest (their kernels and runner are in
//! `aten`). Ops never consume their inputs; new results are registered in the current scope.
//! Hand-written here:
//! host data (`data`), autograd helpers, optimizer steps and random ops made again exactly
//! (`random`). The arithmetic operators are generated too (operators_generated.rs, from the
//! operator attributes of ops.def).

pub(crate) mod aten;
pub(crate) mod autograd;
#[cfg(test)]
mod device_sweep;
pub(crate) mod data;
pub(crate) mod exec;
pub(crate) mod generated;
pub(crate) mod kernels;
pub(crate) mod lists;
mod operators_generated;
pub(crate) mod optim;
pub(crate) mod output_bytes;
pub(crate) mod random;
pub(crate) mod scalars;

pub use autograd::{manual_seed, no_grad, NoGradGuard};
pub use scalars::Scalar;

/// What the generated code sees.
pub(crate) mod prelude {
    pub(crate) use super::optim::AdamHyper;
    pub(crate) use super::aten::run::{self, Schema};
    pub(crate) use super::aten::{kernels, Arg};
    pub(crate) use super::exec::{admitted, given, replay_args, same_lengths, Op};
    pub(crate) use super::scalars::{self, scalar, Scalar};
    pub(crate) use super::{autograd, lists, optim, random};
    pub(crate) use crate::dtype::DType;
    pub(crate) use crate::error::{Error, Result};
    pub(crate) use crate::registry::{TensorId, TensorIds};
    pub(crate) use std::sync::Arc;
    pub(crate) use crate::tensor::Tensor;
    pub(crate) use tch::{Kind, Reduction};

    /// Creation options: ops create tensors in host memory.
    pub(crate) fn opts(dtype: DType) -> (Kind, tch::Device) {
        (dtype.kind(), tch::Device::Cpu)
    }
}

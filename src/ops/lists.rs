//! Tensor-list arguments. libtorch reports an empty list as a generic error from deep inside
//! the op; here it is an argument error naming the op.

use crate::error::{Error, Result};

/// `tensors` if it holds at least one tensor, else TR_ERR_INVALID_ARG.
pub(crate) fn nonempty<'a, 't>(op: &str, tensors: &'a [&'t tch::Tensor]) -> Result<&'a [&'t tch::Tensor]> {
    match tensors.is_empty() {
        true => Err(Error::InvalidArg(format!("{op}: needs at least one tensor, the list is empty"))),
        false => Ok(tensors),
    }
}

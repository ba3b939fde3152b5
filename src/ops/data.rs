//! Host data in and out of tensors, and metadata queries. Hand-written because they move bytes
//! across the boundary rather than calling one libtorch op.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::scalars::Scalar;
use crate::registry::{self, TensorId};

fn checked_numel(shape: &[i64]) -> Result<usize> {
    shape.iter().try_fold(1usize, |n, &d| {
        let d = usize::try_from(d).map_err(|_| Error::InvalidArg(format!("negative dimension {d} in shape {shape:?}")))?;
        n.checked_mul(d).ok_or_else(|| Error::InvalidArg(format!("shape {shape:?} overflows")))
    })
}

pub(crate) fn from_bytes(bytes: &[u8], shape: &[i64], dtype: DType) -> Result<TensorId> {
    let needed = checked_numel(shape)? * dtype.size();
    if bytes.len() != needed {
        return Err(Error::Shape(format!(
            "shape {shape:?} of {dtype:?} needs {needed} bytes, {} were given",
            bytes.len()
        )));
    }
    Ok(registry::insert(tch::Tensor::f_from_data_size(bytes, shape, dtype.kind())?))
}

/// Copies the elements (row-major, contiguous) into `buf`; returns the bytes written.
pub(crate) fn copy_to(id: TensorId, buf: &mut [u8]) -> Result<usize> {
    let [e] = registry::get([id])?;
    let e = crate::residency::readable(&e)?;
    let (numel, size) = (e.numel(), DType::from_kind(e.f_kind()?)?.size());
    let needed = numel * size;
    if buf.len() < needed {
        return Err(Error::BufferTooSmall { needed, given: buf.len() });
    }
    e.f_copy_data_u8(&mut buf[..needed], numel)?;
    Ok(needed)
}

/// Element count, checking that the tensor's dtype is `want`.
pub(crate) fn numel_of(id: TensorId, want: DType) -> Result<usize> {
    let [e] = registry::get([id])?;
    let have = DType::from_kind(e.f_kind()?)?;
    if have != want {
        return Err(Error::Dtype(format!("tensor is {have:?}, {want:?} was requested")));
    }
    Ok(e.numel())
}

pub(crate) fn shape(id: TensorId) -> Result<Vec<i64>> {
    let [e] = registry::get([id])?;
    Ok(e.size())
}

pub(crate) fn dtype(id: TensorId) -> Result<DType> {
    let [e] = registry::get([id])?;
    DType::from_kind(e.f_kind()?)
}

/// Where the tensor's memory is (under a residency manager, its home's).
pub(crate) fn device(id: TensorId) -> Result<tch::Device> {
    let [e] = registry::get([id])?;
    Ok(e.device())
}

pub(crate) fn numel(id: TensorId) -> Result<usize> {
    let [e] = registry::get([id])?;
    Ok(e.numel())
}

/// Runs `read` on the readable copy of a one-element tensor.
fn one_element<R>(id: TensorId, read: impl FnOnce(&tch::Tensor) -> Result<R>) -> Result<R> {
    let [e] = registry::get([id])?;
    let e = crate::residency::readable(&e)?;
    if e.numel() != 1 {
        return Err(Error::Shape(format!("item() needs one element, the tensor has shape {:?}", e.size())));
    }
    read(&e)
}

pub(crate) fn item(id: TensorId) -> Result<f64> {
    one_element(id, |e| Ok(e.f_double_value(&[])?))
}

/// The value of a one-element tensor typed by its dtype: an integer (exact to 64 bits), a bool
/// or a float.
pub(crate) fn item_scalar(id: TensorId) -> Result<Scalar> {
    one_element(id, |e| {
        Ok(match DType::from_kind(e.f_kind()?)? {
            DType::Bool => Scalar::Bool(e.f_int64_value(&[])? != 0),
            DType::U8 | DType::I8 | DType::I16 | DType::I32 | DType::I64 => Scalar::Int(e.f_int64_value(&[])?),
            DType::F16 | DType::F32 | DType::F64 | DType::BF16 => Scalar::Float(e.f_double_value(&[])?),
        })
    })
}

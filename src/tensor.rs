//! `Tensor`: the Rust owner of one reference to a registered tensor. Dropping it releases that
//! reference; if its scope was disposed first, the drop does nothing. Ops are methods generated
//! from the op table (`ops/ops.def`); this file holds lifetime, scope and host-data methods.

use crate::dtype::{DType, Element};
use crate::error::Result;
use crate::ops::data;
use crate::registry::{self, ScopeId, TensorId};
use std::fmt;

pub struct Tensor {
    id: TensorId,
}

impl Tensor {
    /// Takes over one reference of `id` (e.g. a handle that came through the C ABI).
    pub fn from_raw(id: TensorId) -> Tensor {
        Tensor { id }
    }

    /// Gives up ownership without releasing: the caller now owns the reference.
    pub fn into_raw(self) -> TensorId {
        std::mem::ManuallyDrop::new(self).id
    }

    pub fn id(&self) -> TensorId {
        self.id
    }

    /// Registers a tch tensor (it is moved in, not copied).
    pub fn from_tch(t: tch::Tensor) -> Tensor {
        Tensor::from_raw(registry::insert(t))
    }

    /// Runs `f` on the underlying tch tensor (shared storage; no copy).
    pub fn with_tch<R>(&self, f: impl FnOnce(&tch::Tensor) -> R) -> Result<R> {
        let [e] = registry::get([self.id])?;
        let data = crate::residency::readable(&e)?;
        Ok(f(&data))
    }

    /// Another reference to the same handle; each must be dropped.
    pub fn retain(&self) -> Result<Tensor> {
        registry::retain(self.id)?;
        Ok(Tensor::from_raw(self.id))
    }

    /// A new handle to the same storage with its own life, owned by the current scope.
    pub fn alias(&self) -> Result<Tensor> {
        registry::alias(self.id).map(Tensor::from_raw)
    }

    /// Releases this reference now, reporting a stale handle instead of ignoring it.
    pub fn dispose(self) -> Result<()> {
        registry::release(self.into_raw())
    }

    /// Keeps this tensor's storage resident on the residency manager's device (`true`: loaded
    /// now, never evicted, counted against the budget) or lets it go (`false`). Pinning more
    /// than the budget is `BudgetTooSmall`; without a manager, `InvalidArg`.
    pub fn pin_resident(&self, pinned: bool) -> Result<()> {
        crate::residency::pin(self.id, pinned)
    }

    /// Whether this tensor's storage has a copy on the residency manager's device now.
    pub fn is_resident(&self) -> Result<bool> {
        crate::residency::resident(self.id)
    }

    /// Whether the handle is still live.
    pub fn is_valid(&self) -> bool {
        registry::get([self.id]).is_ok()
    }

    /// Copies `data` into a new tensor of the given shape.
    pub fn from_slice<T: Element>(data: &[T], shape: &[i64]) -> Result<Tensor> {
        // SAFETY: `Element` types are plain old data; the byte view covers exactly `data`.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) };
        Tensor::from_bytes(bytes, shape, T::DTYPE)
    }

    /// Copies host bytes into a new tensor of the given shape and dtype.
    pub fn from_bytes(bytes: &[u8], shape: &[i64], dtype: DType) -> Result<Tensor> {
        data::from_bytes(bytes, shape, dtype).map(Tensor::from_raw)
    }

    /// The elements, in row-major order, as host values of the tensor's own dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let mut out = vec![T::default(); data::numel_of(self.id, T::DTYPE)?];
        // SAFETY: as in `from_slice`; every byte pattern copied in is a value of `T`'s dtype.
        let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(&out[..])) };
        data::copy_to(self.id, bytes)?;
        Ok(out)
    }

    pub fn shape(&self) -> Result<Vec<i64>> {
        data::shape(self.id)
    }

    pub fn dtype(&self) -> Result<DType> {
        data::dtype(self.id)
    }

    pub fn numel(&self) -> Result<usize> {
        data::numel(self.id)
    }

    /// The value of a one-element tensor, as f64.
    pub fn item(&self) -> Result<f64> {
        data::item(self.id)
    }

    /// Where the memory is (under a residency manager, the tensor's home: the manager's device
    /// copies are its own).
    pub fn device(&self) -> Result<tch::Device> {
        data::device(self.id)
    }

    /// The value of a one-element tensor typed by its dtype: exact for integer tensors.
    pub fn item_scalar(&self) -> Result<crate::Scalar> {
        data::item_scalar(self.id)
    }

    /// The scope that owns this handle, if any.
    pub fn scope(&self) -> Result<Option<ScopeId>> {
        registry::lock().owner_of(self.id)
    }

    /// Hands ownership to the scope that was current when the owning scope was opened; with no
    /// outer scope the handle becomes detached (owned by the caller).
    pub fn move_to_outer_scope(&self) -> Result<()> {
        registry::lock().move_to_outer(self.id, None)
    }

    /// Leaves the owning scope; the handle then lives until released.
    pub fn detach_from_scope(&self) -> Result<()> {
        registry::lock().detach_from_scope(self.id)
    }

    /// Hands ownership to `target` (None detaches). A disposed target is an error.
    pub fn move_to_scope(&self, target: Option<ScopeId>) -> Result<()> {
        registry::lock().move_to_scope(self.id, target)
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // Stale means a scope already released it: nothing to do.
        let _ = registry::release(self.id);
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.shape(), self.dtype()) {
            (Ok(shape), Ok(dtype)) => write!(f, "Tensor({:#x}, {dtype:?}, {shape:?})", self.id.0),
            _ => write!(f, "Tensor({:#x}, released)", self.id.0),
        }
    }
}

//! Training under the budget: what autograd saves for backward is managed (`saved`), leaves'
//! gradients are kept by the manager (`grads`), and a result that can be made again from its
//! inputs may be dropped rather than written back (`recompute`), priced by the device's rates
//! (`costs`).

pub(super) mod costs;
pub(crate) mod autograd;
pub(super) mod grads;
pub(crate) mod python_hooks;
pub(super) mod recipe;
pub(super) mod recompute;
pub(super) mod saved;

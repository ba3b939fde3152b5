//! Leaf gradients kept by the manager, as storages like any other. A leaf's device copy hands its
//! gradient to `accumulate` (see `crate::residency::autograd::connect_leaf`) rather than to libtorch's accumulator,
//! which would copy it to the leaf's device, the host: the first gradient becomes a new storage
//! (computed on the device, written home only when evicted) and the leaf's `grad` is the host
//! tensor standing for it; later ones are added to its device copy. An optimizer step or
//! `zero_grad` then loads it like any input: no pageable copy, nothing read stale.
//!
//! The leaf's `grad` and every entry made for it are distinct tensors over its storage (`alias`):
//! the manager forgets a storage when no tensor but the dying entry's holds its home, which it
//! could not tell if they shared one.

use crate::residency::device::memory::{Mode, Scope};
use crate::residency::core::manager::Manager;
use crate::residency::core::storage::Role;
use crate::residency::{active, with};
use crate::error::Result;
use crate::registry::Entry;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

impl Manager {
    /// Adds `grad` (computed on the device) to `leaf`'s gradient, making it one if it has none.
    /// Returns the entry it used, to be dropped once the manager's lock is released (a registered
    /// entry dropped under it is forgotten later, as if its tensor were already gone).
    fn accumulate_grad(&mut self, leaf: &tch::Tensor, grad: &tch::Tensor) -> Result<Entry> {
        let _no_grad = tch::no_grad_guard();
        let existing = leaf.f_grad()?;
        if existing.defined() {
            let entry = Entry::new(alias(&existing)?);
            let a = self.acquire(&entry, true, "accumulate_grad")?;
            let added = a.view.shallow_clone().f_add_(grad);
            self.end_op("accumulate_grad", &[(a.key, a.bytes)], None, None);
            self.release(a.storage, true);
            let _ = added?;
            return Ok(entry);
        }
        // A storage of its own, dense (the incoming gradient may be an expanded view, or a
        // buffer another node still holds), with room made before it exists.
        let bytes = (grad.numel() * grad.kind().elt_size_in_bytes()) as u64;
        self.make_room(bytes, "grad")?;
        let owned = {
            let _counted = (self.cfg.device == crate::residency::Device::Simulated).then(|| Scope::enter(Mode::Count));
            grad.f_empty_like()?
        };
        owned.shallow_clone().f_copy_(grad)?;
        let info = crate::residency::torch_storage::storage(&owned, self.cuda())?;
        let entry = self.add_produced(&owned, &info, "grad", &[], None, None, Role::Gradients)?;
        crate::residency::autograd::set_grad(leaf, &alias(&entry)?)?;
        Ok(entry)
    }
}

/// Another tensor over `t`'s storage (same geometry, same version counter).
pub(crate) fn alias(t: &tch::Tensor) -> Result<tch::Tensor> {
    Ok(crate::residency::torch_storage::view_on(t, t)?)
}

/// Without a manager (turned off since the forward pass), the gradient goes to the leaf's device
/// as libtorch's accumulator would take it.
fn accumulate_on_the_host(leaf: &tch::Tensor, grad: &tch::Tensor) -> Result<()> {
    let _no_grad = tch::no_grad_guard();
    let grad = grad.f_to_device(leaf.device())?;
    let existing = leaf.f_grad()?;
    if existing.defined() {
        let _ = existing.shallow_clone().f_add_(&grad)?;
    } else {
        crate::residency::autograd::set_grad(leaf, &grad.f_contiguous()?.f_detach()?)?;
    }
    Ok(())
}

fn accumulate(leaf: tch::Tensor, grad: tch::Tensor) -> Result<()> {
    if !active() {
        return accumulate_on_the_host(&leaf, &grad);
    }
    // Inside backward: where other ops hold the room, it waits for it (see `room::with_room`).
    crate::residency::with_room(|| with(|m| m.accumulate_grad(&leaf, &grad))).map(drop)
}

/// The gradient node's hook: takes a new `at::Tensor*` for the leaf and one for the gradient.
unsafe extern "C" fn accumulate_hook(leaf: *mut c_void, grad: *mut c_void, err: *mut c_char, err_len: usize) -> c_int {
    // SAFETY: the node hands over two new heap `at::Tensor*` for us to own.
    let (leaf, grad) = unsafe { (tch::Tensor::from_ptr(leaf.cast()), tch::Tensor::from_ptr(grad.cast())) };
    let message = match catch_unwind(AssertUnwindSafe(|| accumulate(leaf, grad))) {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e.to_string(),
        Err(_) => "libtensorref panicked while accumulating a gradient".to_string(),
    };
    crate::shim::write_error(err, err_len, &message);
    1
}

/// Makes `view` (the device copy of the leaf `leaf`) hand its gradient to the manager.
pub(crate) fn connect_leaf(view: &tch::Tensor, leaf: &tch::Tensor) -> Result<()> {
    Ok(crate::residency::autograd::connect_leaf(view, leaf, accumulate_hook)?)
}

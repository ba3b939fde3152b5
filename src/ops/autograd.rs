//! Autograd helpers beyond the table: the no-grad guard, reading, zeroing and dropping a
//! gradient, and the seed.

use crate::error::Result;

/// Seeds libtorch's default random generator (rand, randn, dropout).
pub fn manual_seed(seed: u64) {
    tch::manual_seed(seed as i64);
}

/// Turns gradient tracking off on this thread until dropped, then restores the previous mode.
#[must_use = "gradients are tracked again as soon as the guard is dropped"]
pub struct NoGradGuard(#[allow(dead_code)] tch::NoGradGuard);

impl NoGradGuard {
    pub fn new() -> NoGradGuard {
        NoGradGuard(tch::no_grad_guard())
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs `f` without gradient tracking; the previous mode is restored on every exit path.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = NoGradGuard::new();
    f()
}

pub(crate) fn zero_grad(a: &tch::Tensor) -> Result<()> {
    let mut grad = a.f_grad()?;
    if grad.defined() {
        let _ = grad.f_detach_()?.f_zero_()?;
    }
    Ok(())
}

/// Drops `a`'s gradient. Under a residency manager its storage is forgotten at once when nothing
/// else holds it (a `grad` handle the program kept keeps it).
pub(crate) fn clear_grad(a: &tch::Tensor) -> Result<()> {
    let grad = a.f_grad()?;
    if grad.defined() {
        crate::residency::autograd::set_grad(a, &tch::Tensor::new())?;
        crate::residency::let_go(grad)?;
    }
    Ok(())
}

/// The accumulated gradient of `a`, as a tensor of its own over the gradient's storage (a residency
/// manager keeps gradients as storages, and tells their holders apart by tensor).
pub(crate) fn grad(a: &tch::Tensor) -> Result<tch::Tensor> {
    let grad = a.f_grad()?;
    Ok(if grad.defined() { crate::residency::torch_storage::view_on(&grad, &grad)? } else { grad })
}

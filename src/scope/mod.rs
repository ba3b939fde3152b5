//! Dispose scopes (TorchSharp's design, docs/dispose-scopes.md). A scope owns the
//! handles created while it is current on its thread and releases them when it is disposed.
//! `Scope` and `with_scope` are the Rust API; the C ABI calls the same registry operations.

pub use crate::registry::Stats;

use crate::error::Result;
use crate::registry::{self, ScopeId};
use crate::tensor::Tensor;
use std::marker::PhantomData;

/// An open dispose scope; it becomes this thread's current scope. Dropping it disposes it.
///
/// `Scope` is neither `Send` nor `Sync`: scopes belong to the thread that opened them.
#[derive(Debug)]
pub struct Scope {
    id: ScopeId,
    _per_thread: PhantomData<*const ()>,
}

/// Runs `f` inside a new scope and disposes the scope on every exit path, panics included.
/// Tensors the closure returns must be moved out first (`move_to_outer_scope`), or they are
/// released with the scope.
pub fn with_scope<R>(f: impl FnOnce(&Scope) -> R) -> R {
    let scope = Scope::new();
    f(&scope)
}

impl Scope {
    /// Opens a scope on this thread; handles created on this thread now belong to it.
    ///
    /// # Panics
    /// On a thread that is exiting (from a thread-local destructor), where no scope can be kept.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Scope {
        let id = registry::lock().new_scope().unwrap_or_else(|e| panic!("{e}"));
        Scope { id, _per_thread: PhantomData }
    }

    /// The innermost open scope of this thread, if any.
    pub fn current() -> Option<ScopeId> {
        registry::lock().current_scope()
    }

    pub fn id(&self) -> ScopeId {
        self.id
    }

    /// Releases every owned handle and closes the scope. A second call does nothing.
    pub fn dispose(&self) {
        let _ = registry::update(|st, freed| st.dispose_scope(self.id, freed));
    }

    /// Releases every owned handle; the scope stays open and keeps capturing.
    pub fn dispose_everything(&self) -> Result<()> {
        self.dispose_everything_but(&[])
    }

    /// Releases every owned handle except those in `keep`, which stay owned. Handles in `keep`
    /// that the scope does not own are left alone.
    pub fn dispose_everything_but(&self, keep: &[&Tensor]) -> Result<()> {
        let keep: Vec<_> = keep.iter().map(|t| t.id()).collect();
        registry::update(|st, freed| st.dispose_everything_but(self.id, &keep, freed))
    }

    /// Takes ownership of `t`, from another scope or from the caller.
    pub fn attach(&self, t: &Tensor) -> Result<()> {
        registry::lock().attach(self.id, t.id())
    }

    /// Gives `t` back to the caller if this scope owns it.
    pub fn detach(&self, t: &Tensor) -> Result<()> {
        registry::lock().detach(self.id, t.id())
    }

    /// Moves `t` to this scope's outer scope (detached if none), if this scope owns it.
    pub fn move_to_outer(&self, t: &Tensor) -> Result<()> {
        registry::lock().move_to_outer(t.id(), Some(self.id))
    }

    pub fn contains(&self, t: &Tensor) -> Result<bool> {
        registry::lock().contains(self.id, t.id())
    }

    /// Number of handles this scope owns.
    pub fn len(&self) -> Result<usize> {
        registry::lock().scope_len(self.id)
    }

    pub fn is_empty(&self) -> Result<bool> {
        self.len().map(|n| n == 0)
    }

    pub fn is_disposed(&self) -> bool {
        registry::lock().is_disposed(self.id)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        self.dispose();
    }
}

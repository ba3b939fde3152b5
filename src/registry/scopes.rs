//! Dispose-scope bookkeeping inside the registry's state (the API is `crate::scope`): the scope
//! slots, each thread's chain of open scopes, and the operations of docs/dispose-scopes.md.
//! Everything here runs under the registry lock; entries that die are handed back to the caller
//! to free after the lock is released.
//!
//! Each thread's open scopes form a doubly linked chain (`outer`/`inner`); the thread's current
//! scope is the innermost one. Disposing a scope in the middle relinks its neighbours, so
//! `move_to_outer_scope` from an inner scope reaches the nearest live outer one.

use super::stats;
use super::{GenSlab, Remains, ScopeId, State, TensorId};
use crate::error::{Error, HandleKind, Result};
use slab::Slab;
use std::cell::Cell;

pub(crate) struct ScopeRec {
    /// Slot keys of the tensor handles this scope owns.
    pub(crate) members: Vec<usize>,
    outer: Option<usize>,
    inner: Option<usize>,
    thread: usize,
}

pub(crate) struct ScopeTable {
    scopes: GenSlab<ScopeRec>,
    /// Per registered thread: its innermost open scope.
    threads: Slab<Option<usize>>,
}

/// This thread's key in `ScopeTable::threads`, assigned on first use. When the thread exits,
/// the scopes it left open are disposed and the key is freed.
struct ThreadKey(Cell<Option<usize>>);

impl Drop for ThreadKey {
    fn drop(&mut self) {
        if let Some(thread) = self.0.get() {
            let freed = {
                let mut state = super::lock();
                let mut freed = Vec::new();
                while let Some(scope) = state.scopes.threads[thread] {
                    state.dispose_key(scope, &mut freed);
                }
                state.scopes.threads.remove(thread);
                freed
            };
            drop(freed);
        }
    }
}

thread_local! {
    static THREAD: ThreadKey = const { ThreadKey(Cell::new(None)) };
}

impl ScopeTable {
    pub(crate) const fn new() -> Self {
        ScopeTable { scopes: GenSlab::new(HandleKind::Scope), threads: Slab::new() }
    }

    pub(crate) fn at_mut(&mut self, key: usize) -> &mut ScopeRec {
        self.scopes.at_mut(key)
    }

    /// This thread's key, registering the thread on first use; None while it is torn down.
    fn thread(&mut self) -> Option<usize> {
        THREAD
            .try_with(|t| match t.0.get() {
                Some(k) => k,
                None => {
                    let k = self.threads.insert(None);
                    t.0.set(Some(k));
                    k
                }
            })
            .ok()
    }

    /// The slot key of this thread's current (innermost open) scope.
    #[inline]
    pub(crate) fn current_key(&mut self) -> Option<usize> {
        let thread = THREAD.try_with(|t| t.0.get()).ok().flatten()?;
        self.threads[thread]
    }

    fn id(&self, key: usize) -> ScopeId {
        ScopeId(self.scopes.handle_of(key))
    }
}

impl State {
    /// Resolves a scope handle; a retired one is `ScopeDisposed`.
    fn scope_key(&self, s: ScopeId) -> Result<usize> {
        self.scopes.scopes.key(s.0).map_err(|e| match e {
            Error::StaleHandle { .. } => Error::ScopeDisposed(s.0),
            e => e,
        })
    }

    fn owner_key(&self, tensor: usize) -> Option<usize> {
        self.tensors.at(tensor).owner.map(|m| m.scope)
    }

    /// Opens a scope on this thread. Fails on a thread whose thread-local storage is already
    /// torn down (an atexit handler, say): such a thread can no longer have a scope stack.
    pub(crate) fn new_scope(&mut self) -> Result<ScopeId> {
        let thread = self.scopes.thread().ok_or_else(|| {
            Error::InvalidArg("a scope cannot be opened while this thread is exiting (its thread-local state is gone)".into())
        })?;
        let outer = self.scopes.threads[thread];
        let (key, handle) = self.scopes.scopes.insert(ScopeRec { members: Vec::new(), outer, inner: None, thread });
        if let Some(outer) = outer {
            self.scopes.at_mut(outer).inner = Some(key);
        }
        self.scopes.threads[thread] = Some(key);
        Ok(ScopeId(handle))
    }

    /// Disposes a scope; disposing a disposed scope does nothing.
    pub(crate) fn dispose_scope(&mut self, s: ScopeId, freed: &mut Vec<Remains>) -> Result<()> {
        match self.scope_key(s) {
            Ok(key) => {
                self.dispose_key(key, freed);
                Ok(())
            }
            Err(Error::ScopeDisposed(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn dispose_key(&mut self, key: usize, freed: &mut Vec<Remains>) {
        self.drop_members(key, &[], freed);
        let rec = self.scopes.scopes.remove(key);
        match rec.inner {
            Some(inner) => self.scopes.at_mut(inner).outer = rec.outer,
            None => self.scopes.threads[rec.thread] = rec.outer,
        }
        if let Some(outer) = rec.outer {
            self.scopes.at_mut(outer).inner = rec.inner;
        }
    }

    /// Drops the scope's reference to each member except those in `keep`; the scope stays open.
    pub(crate) fn dispose_everything_but(&mut self, s: ScopeId, keep: &[TensorId], freed: &mut Vec<Remains>) -> Result<()> {
        let key = self.scope_key(s)?;
        let mut keep_keys = keep.iter().map(|t| self.tensors.key(t.0)).collect::<Result<Vec<_>>>()?;
        keep_keys.sort_unstable();
        self.drop_members(key, &keep_keys, freed);
        Ok(())
    }

    /// `keep` must be sorted.
    fn drop_members(&mut self, scope: usize, keep: &[usize], freed: &mut Vec<Remains>) {
        let members = std::mem::take(&mut self.scopes.at_mut(scope).members);
        let mut kept = Vec::with_capacity(keep.len());
        for key in members {
            if keep.binary_search(&key).is_ok() {
                kept.push(key);
                continue;
            }
            self.tensors.at_mut(key).owner = None;
            freed.extend(self.drop_ref(key, true));
        }
        for &key in &kept {
            self.link(key, scope);
        }
    }

    pub(crate) fn attach(&mut self, s: ScopeId, t: TensorId) -> Result<()> {
        let scope = self.scope_key(s)?;
        let key = self.tensors.key(t.0)?;
        match self.owner_key(key) {
            Some(owner) if owner == scope => {}
            Some(_) => {
                self.unlink(key);
                self.link(key, scope);
            }
            None => {
                self.link(key, scope);
                stats::count(|c| c.attached_to_scope += 1);
            }
        }
        Ok(())
    }

    /// Detaches `t` if `s` owns it; otherwise nothing happens.
    pub(crate) fn detach(&mut self, s: ScopeId, t: TensorId) -> Result<()> {
        let scope = self.scope_key(s)?;
        let key = self.tensors.key(t.0)?;
        if self.owner_key(key) == Some(scope) {
            self.detach_key(key);
        }
        Ok(())
    }

    pub(crate) fn detach_from_scope(&mut self, t: TensorId) -> Result<()> {
        let key = self.tensors.key(t.0)?;
        self.detach_key(key);
        Ok(())
    }

    fn detach_key(&mut self, key: usize) {
        if self.owner_key(key).is_some() {
            self.unlink(key);
            stats::count(|c| c.detached_from_scope += 1);
        }
    }

    /// Moves `t` from its owner to the owner's outer scope (detached if there is none). With
    /// `from`, only when `from` owns it.
    pub(crate) fn move_to_outer(&mut self, t: TensorId, from: Option<ScopeId>) -> Result<()> {
        let from = from.map(|s| self.scope_key(s)).transpose()?;
        let key = self.tensors.key(t.0)?;
        let Some(owner) = self.owner_key(key) else { return Ok(()) };
        if from.is_some_and(|f| f != owner) {
            return Ok(());
        }
        match self.scopes.scopes.at(owner).outer {
            Some(outer) => {
                self.unlink(key);
                self.link(key, outer);
            }
            None => self.detach_key(key),
        }
        Ok(())
    }

    /// Moves `t` to `target` (None detaches). Moving into a disposed scope is an error.
    pub(crate) fn move_to_scope(&mut self, t: TensorId, target: Option<ScopeId>) -> Result<()> {
        let Some(target) = target else { return self.detach_from_scope(t) };
        self.attach(target, t)
    }

    pub(crate) fn contains(&self, s: ScopeId, t: TensorId) -> Result<bool> {
        let scope = self.scope_key(s)?;
        match self.tensors.key(t.0) {
            Ok(key) => Ok(self.owner_key(key) == Some(scope)),
            Err(Error::StaleHandle { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn scope_len(&self, s: ScopeId) -> Result<usize> {
        Ok(self.scopes.scopes.at(self.scope_key(s)?).members.len())
    }

    pub(crate) fn current_scope(&mut self) -> Option<ScopeId> {
        self.scopes.current_key().map(|k| self.scopes.id(k))
    }

    pub(crate) fn owner_of(&self, t: TensorId) -> Result<Option<ScopeId>> {
        let key = self.tensors.key(t.0)?;
        Ok(self.owner_key(key).map(|k| self.scopes.id(k)))
    }

    pub(crate) fn is_disposed(&self, s: ScopeId) -> bool {
        self.scope_key(s).is_err()
    }
}

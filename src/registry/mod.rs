//! The process-wide registry of tensor handles, shared by every thread and every language.
//!
//! One mutex guards all bookkeeping: the tensor slots, the scopes (see `crate::scope`) and the
//! entry allocations kept for reuse (`spares`). It is held only to look up or insert; libtorch
//! work runs outside it on `Arc<Entry>`s cloned out under the lock, and freed tensors are dropped
//! after it is released.

mod entry;
mod handle;
mod scopes;
mod spares;
pub(crate) mod stats;

pub(crate) use entry::{on_forget, on_recycled, Entry};
pub(crate) use handle::GenSlab;
pub(crate) use spares::{retire, share, Remains};
use spares::Spares;

use crate::error::{Error, HandleKind, Result};
use scopes::ScopeTable;
pub use stats::Stats;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// A tensor handle as the registry sees it (the C ABI's `tr_tensor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorId(pub u64);

/// An op's result handles: a few, held without a heap allocation.
pub(crate) type TensorIds = smallvec::SmallVec<[TensorId; 4]>;

/// A scope handle as the registry sees it (the C ABI's `tr_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScopeId(pub u64);

/// A handle's registry slot: its reference count, its owning scope and the shared entry.
pub(crate) struct Slot {
    pub(crate) refs: u32,
    pub(crate) owner: Option<Member>,
    pub(crate) entry: Arc<Entry>,
}

/// Membership of a handle in a scope: the scope's slot key and the handle's index in its list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) scope: usize,
    pub(crate) pos: usize,
}

pub(crate) struct State {
    pub(crate) tensors: GenSlab<Slot>,
    pub(crate) scopes: ScopeTable,
    spares: Spares,
}

static STATE: Mutex<State> = Mutex::new(State {
    tensors: GenSlab::new(HandleKind::Tensor),
    scopes: ScopeTable::new(),
    spares: Spares::new(),
});

/// Locks the registry. A panic while it was held cannot leave it half-updated (every update is
/// completed before anything that can panic), so a poisoned lock is simply taken over.
pub(crate) fn lock() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Looks up `N` handles under one lock acquisition.
#[inline]
pub(crate) fn get<const N: usize>(ids: [TensorId; N]) -> Result<[Arc<Entry>; N]> {
    let state = lock();
    let mut keys = [0usize; N];
    for (k, id) in keys.iter_mut().zip(ids) {
        *k = state.tensors.key(id.0)?;
    }
    Ok(keys.map(|k| state.tensors.at(k).entry.clone()))
}

/// Looks up an optional handle; handle 0 means none.
pub(crate) fn get_opt(id: TensorId) -> Result<Option<Arc<Entry>>> {
    if id.0 == 0 {
        return Ok(None);
    }
    get([id]).map(|[e]| Some(e))
}

/// Looks up a list of handles under one lock acquisition.
pub(crate) fn get_many(ids: &[TensorId]) -> Result<Vec<Arc<Entry>>> {
    let state = lock();
    ids.iter().map(|id| Ok(state.tensors.get(id.0)?.entry.clone())).collect()
}

/// Registers a new tensor with one reference, owned by this thread's current scope, if any.
#[inline]
pub(crate) fn insert(tensor: tch::Tensor) -> TensorId {
    lock().register_tensor(tensor)
}

/// Registers an op's results like `insert`, under one lock: each defined one gets a handle, an
/// undefined one (an absent result) the handle 0.
pub(crate) fn insert_all(tensors: impl IntoIterator<Item = tch::Tensor>) -> TensorIds {
    let mut state = lock();
    let mut ids = TensorIds::new();
    for t in tensors {
        ids.push(if t.defined() { state.register_tensor(t) } else { TensorId(0) });
    }
    ids
}

/// Registers an entry (an alias's, or a managed result's) like `insert`.
pub(crate) fn insert_entry(entry: Arc<Entry>) -> TensorId {
    lock().register(entry)
}

/// Adds a reference to a live handle.
pub(crate) fn retain(id: TensorId) -> Result<()> {
    let mut state = lock();
    let slot = state.tensors.get_mut(id.0)?;
    slot.refs = slot
        .refs
        .checked_add(1)
        .ok_or_else(|| Error::InvalidArg("reference count overflow".into()))?;
    Ok(())
}

/// Drops one reference; at zero the handle dies, leaves its scope and its storage is freed
/// (after the lock is released, so libtorch's free never runs under it).
pub(crate) fn release(id: TensorId) -> Result<()> {
    let freed = {
        let mut state = lock();
        let key = state.tensors.key(id.0)?;
        state.release_key(key)
    };
    match freed {
        Some(Remains::Entry(entry)) => retire(entry), // (a managed result's: its allocation kept)
        other => drop(other),
    }
    Ok(())
}

/// Drops one reference of each handle under one lock acquisition (handle 0 is skipped). Every
/// live handle is released even if some are not; the first bad one is reported.
pub(crate) fn release_many(ids: &[TensorId]) -> Result<()> {
    let mut first_error = None;
    update(|state, freed| {
        for id in ids.iter().filter(|id| id.0 != 0) {
            match state.tensors.key(id.0) {
                Ok(key) => freed.extend(state.release_key(key)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Ok(())
    })?;
    first_error.map_or(Ok(()), Err)
}

/// A new handle to the same storage, with its own reference count and scope membership.
pub(crate) fn alias(id: TensorId) -> Result<TensorId> {
    let [entry] = get([id])?;
    Ok(insert_entry(entry))
}

/// Number of live tensor handles in the process.
pub fn live_handles() -> usize {
    lock().tensors.len()
}

/// Logical bytes held by live handles on `device` (views count at their own size, and each
/// alias counts once). Summed when asked, over every live handle: ops never pay for it.
pub fn live_bytes(device: tch::Device) -> u64 {
    let slot = match device {
        tch::Device::Cuda(n) => 1 + n,
        _ => 0,
    };
    let state = lock();
    state.tensors.values().filter(|s| s.entry.device_slot() == slot).map(|s| s.entry.bytes()).sum()
}

impl State {
    /// Registers `tensor` in a spare entry if there is one (see `register`).
    #[inline]
    fn register_tensor(&mut self, tensor: tch::Tensor) -> TensorId {
        let entry = self.spares.entry(tensor);
        self.register(entry)
    }

    /// Adds a slot with one reference to `entry`, owned by this thread's current scope, if any.
    fn register(&mut self, entry: Arc<Entry>) -> TensorId {
        let scope = self.scopes.current_key();
        let (key, handle) = self.tensors.insert(Slot { refs: 1, owner: None, entry });
        match scope {
            Some(scope) => {
                self.link(key, scope);
                stats::count(|s| s.created_in_scope += 1);
            }
            None => stats::count(|s| s.created_outside_scope += 1),
        }
        TensorId(handle)
    }

    /// The entry of handle `id`, for a caller that looks up several under one lock.
    #[inline]
    pub(crate) fn entry(&self, id: TensorId) -> Result<Arc<Entry>> {
        Ok(self.tensors.get(id.0)?.entry.clone())
    }

    /// Drops one reference of the live slot at `key`. Returns what to free if it died; the
    /// caller drops it once the lock is released.
    pub(crate) fn release_key(&mut self, key: usize) -> Option<Remains> {
        let in_scope = self.tensors.at(key).owner.is_some();
        self.drop_ref(key, in_scope)
    }

    /// Drops one reference; a handle that dies leaves its scope (if it still has one) and is
    /// counted as disposed in or outside a scope as `in_scope` says.
    pub(crate) fn drop_ref(&mut self, key: usize, in_scope: bool) -> Option<Remains> {
        let slot = self.tensors.at_mut(key);
        slot.refs -= 1;
        if slot.refs > 0 {
            return None;
        }
        self.unlink(key);
        let slot = self.tensors.remove(key);
        stats::count(|s| match in_scope {
            true => s.disposed_in_scope += 1,
            false => s.disposed_outside_scope += 1,
        });
        Some(self.spares.reclaim(slot.entry))
    }

    /// Makes the handle at `key` a member of `scope` (it must have no owner).
    pub(crate) fn link(&mut self, key: usize, scope: usize) {
        let members = &mut self.scopes.at_mut(scope).members;
        members.push(key);
        let pos = members.len() - 1;
        self.tensors.at_mut(key).owner = Some(Member { scope, pos });
    }

    /// Removes the handle at `key` from its owning scope, if any, in O(1).
    pub(crate) fn unlink(&mut self, key: usize) {
        let Some(Member { scope, pos }) = self.tensors.at_mut(key).owner.take() else {
            return;
        };
        let members = &mut self.scopes.at_mut(scope).members;
        members.swap_remove(pos);
        if let Some(&moved) = members.get(pos) {
            if let Some(m) = self.tensors.at_mut(moved).owner.as_mut() {
                m.pos = pos;
            }
        }
    }
}

/// Runs `f` under the registry lock; entries it frees are dropped after the lock is released.
pub(crate) fn update<R>(f: impl FnOnce(&mut State, &mut Vec<Remains>) -> Result<R>) -> Result<R> {
    let mut freed = Vec::new();
    let result = f(&mut lock(), &mut freed);
    drop(freed);
    result
}

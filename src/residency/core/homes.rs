//! Which storage a tensor views, and the storages' host homes: registering a storage the first
//! time an op uses it (memory of the library's is moved into page-locked memory once), and
//! forgetting it when its last view dies.

use crate::residency::core::manager::Manager;
use crate::residency::device::Device;
use crate::residency::core::storage::{page_locked, Home, Storage};
use crate::residency::torch_storage::StorageRef;
use crate::residency::policy::flow::trace::TraceKey;
use crate::error::Result;
use crate::registry::Entry;
use std::sync::{Mutex, PoisonError};

/// Pageable memory that homes were moved out of (see `pin_home`), freed once no reader can be
/// using it. Not the manager's: a read may outlive the manager that started it.
static RETIRED: Mutex<Vec<tch::Tensor>> = Mutex::new(Vec::new());

impl Manager {
    /// The storage `entry` views, registering it (and the storage, the first time) if needed.
    pub(in crate::residency) fn storage_of(&mut self, entry: &Entry) -> Result<u64> {
        let id = entry.storage();
        if self.storages.contains_key(&id) {
            return Ok(id);
        }
        let info = crate::residency::torch_storage::storage(entry, self.cuda())?;
        let id = match self.by_home.get(&info.id) {
            Some(&id) => id,
            None => self.add_storage(entry, info)?,
        };
        self.attach(entry, id);
        Ok(id)
    }

    /// The storage `entry` views if the manager knows it (nothing is registered).
    pub(in crate::residency) fn find(&self, entry: &Entry) -> Result<Option<u64>> {
        let id = entry.storage();
        if self.storages.contains_key(&id) {
            return Ok(Some(id));
        }
        self.home_of(entry)
    }

    /// The storage whose home `t` views, if any.
    pub(in crate::residency) fn home_of(&self, t: &tch::Tensor) -> Result<Option<u64>> {
        let info = crate::residency::torch_storage::storage(t, self.cuda())?;
        Ok(self.by_home.get(&info.id).copied())
    }

    pub(in crate::residency) fn attach(&mut self, entry: &Entry, id: u64) {
        entry.attach(id);
        self.storages.get_mut(&id).expect("attached to a known storage").views += 1;
    }

    /// Registers the storage of a tensor made outside the manager. Pageable memory of ours is
    /// moved into page-locked memory now, once, copying it (see `pin_home`). Memory never written
    /// yet (`Entry::fresh`) stays as it is: it is never loaded (brought to the device by
    /// allocating there), so it needs page-locked memory only when its device copy is first
    /// written home, and gets it then, without a copy (`write_home`).
    pub(in crate::residency) fn add_storage(&mut self, entry: &Entry, info: crate::residency::torch_storage::StorageInfo) -> Result<u64> {
        let home = StorageRef::of(entry)?;
        let on_device = self.cuda() && entry.device() == self.cfg.device.tch();
        let kind = match () {
            _ if on_device => Home::OnDevice,
            _ if info.external() => Home::External { page_locked: info.page_locked() },
            _ if info.page_locked() => Home::PageLocked,
            _ => Home::Pageable,
        };
        // Its key is its id, which the table gives it as it goes in.
        let mut s = Storage::new(home, kind, info.nbytes, TraceKey::Persistent(0));
        s.fresh = self.moves() && matches!(kind, Home::Pageable | Home::PageLocked) && entry.take_fresh();
        if on_device {
            s.device = Some(StorageRef::of(entry)?);
        }
        if kind == Home::Pageable && self.moves() && self.cfg.pin_host_memory && !s.fresh {
            let allocations = pin_home(&mut s, self.cfg.device, true)?;
            self.stats.count_page_locked(allocations, s.bytes);
        }
        let fresh = s.fresh;
        let id = self.storages.insert(|id| Storage { key: TraceKey::Persistent(id), ..s })?;
        if on_device {
            self.by_device.insert(info.id, id);
        }
        self.by_home.insert(info.id, id);
        self.window_epoch += 1;
        if fresh {
            self.name_fresh(id);
        }
        Ok(id)
    }

    /// A storage made from nothing (`empty` for a copy, `zeros_like`) is named in the trace as
    /// the result of the op under way, its first: its counterpart in the next iteration, a new
    /// storage, then has the same name, and Flow follows its uses as a result's. Named by its
    /// id, new each iteration, it would read as never used again: evicted first, written back,
    /// and loaded at its op in backward rather than prefetched. One storage an op is so named;
    /// any other keeps its id, and so does this one if the op makes a result (`unname_fresh`).
    fn name_fresh(&mut self, id: u64) {
        let key = self.trace.key_for_new();
        if self.fresh_named.is_some_and(|(named, _)| named == key) {
            return;
        }
        self.fresh_named = Some((key, id));
        self.storages.get_mut(&id).expect("registered above").key = key;
        if self.policy.prefetches() && self.trace.following() {
            self.by_key.insert(key, id);
        }
    }

    /// The op under way made a result named `key`: the storage made from nothing it first used
    /// (`name_fresh`), if so named, takes its own id again.
    pub(in crate::residency) fn unname_fresh(&mut self, key: TraceKey) {
        let Some((_, id)) = self.fresh_named.filter(|&(named, _)| named == key) else { return };
        if let Some(s) = self.storages.get_mut(&id) {
            s.key = TraceKey::Persistent(id);
        }
        if self.by_key.get(&key) == Some(&id) {
            self.by_key.remove(&key);
        }
    }

    /// Frees the memory homes moved out of, if no reader is running.
    pub(in crate::residency) fn free_retired(&self) {
        let mut retired = RETIRED.lock().unwrap_or_else(PoisonError::into_inner);
        if !retired.is_empty() && crate::residency::readers() == 0 {
            retired.clear();
        }
    }

    // ------------------------------------------------------------ ops

    /// Called when a registered entry dies. The storage is forgotten with its last view, unless
    /// other tensors still hold its home (views made before the manager saw it, a leaf's
    /// `grad`): then it stays known, so they keep reading current data through the manager,
    /// until they are gone too.
    /// `holding`: the entry's tensor still holds a reference to the home, and it goes with the
    /// entry (the entry is being dropped now, not forgotten later, and no other handle shares its
    /// TensorImpl: if one does, that handle still views the storage, and must read what the
    /// manager holds).
    pub(crate) fn forget(&mut self, id: u64, holding: bool) {
        if let Some(s) = self.storages.get_mut(&id) {
            s.views -= 1;
            if s.views > 0 {
                self.held_by_recipes(id);
            } else {
                // The dying entry's tensor may hold one more reference to the home.
                self.forget_unheld(id, i32::from(holding));
                if self.storages.contains_key(&id) {
                    self.orphans.push(id);
                }
            }
        }
        // The orphans are checked once per as many forgotten entries as there are orphans, so a
        // release costs the same however many there are (every parameter's gradient is one).
        self.forgotten += 1;
        if self.forgotten >= self.orphans.len() {
            self.forgotten = 0;
            let orphans = std::mem::take(&mut self.orphans);
            self.orphans = orphans.into_iter().filter(|&id| !self.forget_unheld(id, 0)).collect();
        }
    }

    /// Forgets a storage no registered view uses if nothing holds its home (a home without memory
    /// too: a leaf's gradient holds one) but its own record and `going` more references, which go
    /// with the caller. Returns whether it did.
    pub(in crate::residency) fn forget_unheld(&mut self, id: u64, going: i32) -> bool {
        let Some(s) = self.storages.get(&id) else { return true };
        if s.views > 0 {
            return true; // registered again: no longer an orphan
        }
        if s.home.holders() > s.own_refs(s.home.id()) + going {
            return false;
        }
        self.drop_recipe(id);
        let mut s = self.storages.remove(&id).expect("found above");
        self.by_home.remove(&s.home.id());
        if s.resident() {
            self.by_device.remove(&s.device_id());
        }
        self.dependents.remove(&id);
        if self.by_key.get(&s.key) == Some(&id) {
            self.by_key.remove(&s.key);
        }
        if s.resident() && s.counted() {
            self.stats.device_bytes -= s.bytes;
            self.device_by_role.sub(s.role, s.bytes);
            if let Some(copy) = s.device.take() {
                self.free_copy(copy, s.bytes, s.read_on_compute, s.written_home); // see `device::freeing`
            }
            crate::residency::core::room::freed();
        }
        if s.pinned {
            self.stats.pinned_bytes -= s.bytes;
        }
        true
    }
}

/// Moves a home into page-locked memory, copying it unless `copy` is false (the whole home is
/// overwritten next: a write-back). The other way, registering the memory in place
/// (cudaHostRegister), is faster once (about half the time on an H100: docs/performance.md, "The
/// final run"). This way is taken because the memory then belongs to that allocator, which
/// records the copies that use it, reuses it for later homes and frees it; registered memory must
/// be unregistered before its owner frees it, which the library cannot see (a wrapper around the
/// storage's deleter, as `crate::residency::torch_storage::mark_external` puts on external memory,
/// could: the way to register in place). The home's StorageImpl takes the new memory, so every
/// view of it follows; the old memory is freed once no reader can still use it. Returns how many
/// page-locked allocations it took (for the stats).
pub(in crate::residency) fn pin_home(s: &mut Storage, device: Device, copy: bool) -> Result<u64> {
    let home = s.home.bytes()?;
    let (old, allocations) = page_locked(device, || crate::residency::torch_storage::home_pin(&home, device.cuda(), copy))?;
    RETIRED.lock().unwrap_or_else(PoisonError::into_inner).push(old);
    s.kind = Home::PageLocked;
    Ok(allocations)
}

//! What reaches the manager outside ops: reads of a tensor's current data, a home shared with
//! the outside (DLPack export), pins, and the drain before the manager is replaced or turned off.

use crate::error::{Error, Result};
use crate::registry::Entry;
use crate::residency::core::manager::Manager;
use crate::residency::core::report::EventKind;
use crate::residency::core::storage::{Home, Storage};
use crate::residency::device::Transfer;
use crate::residency::training::recipe::Recompute;
use std::sync::Arc;

impl Manager {
    pub(crate) fn is_resident(&self, entry: &Entry) -> Result<bool> {
        Ok(self.find(entry)?.is_some_and(|id| self.storages[&id].resident()))
    }

    /// What a read of `entry` should read: its view of the device copy if that is newer, else
    /// its home, with the write-back still copying into it (to wait for outside the lock).
    pub(crate) fn readable(&mut self, entry: &Entry) -> Result<(tch::Tensor, Option<Arc<Transfer>>)> {
        let Some(id) = self.find(entry)? else { return Ok((entry.shallow_clone(), None)) };
        self.remake_if_dropped(id, "read")?;
        if let Some(log) = &mut self.schedule {
            log.host_read(id);
        }
        let s = self.storages.get_mut(&id).expect("found");
        match (&s.device, s.dirty) {
            (Some(device), true) => Ok((device.view(entry)?, None)),
            _ => Ok((entry.shallow_clone(), s.pending_write())),
        }
    }

    /// Before `entry`'s home is shared outside: its storage becomes external (its home memory is
    /// marked so; see `Home::External`), a newer device copy is written home and the device copy
    /// dropped unless an op uses it. Returns the write-back to wait for.
    pub(crate) fn settle_home(&mut self, entry: &Entry) -> Result<Vec<Arc<Transfer>>> {
        let id = self.storage_of(entry)?;
        self.remake_if_dropped(id, "export")?;
        self.before_write(id, "export")?;
        self.pin_storage(id, false)?; // shared memory is never held on the device (see `pin`)
        if self.storages[&id].evictable() {
            self.evict(id, "export")?;
        } else {
            self.write_home(id, "export")?;
        }
        self.owed.clear();
        let s = self.storages.get_mut(&id).expect("registered");
        crate::residency::torch_storage::mark_external(&s.home.bytes()?)?;
        if let Home::PageLocked | Home::Pageable = s.kind {
            s.kind = Home::External { page_locked: s.kind == Home::PageLocked };
        }
        Ok(s.pending_write().into_iter().collect())
    }

    /// Pins (or unpins) an entry's storage: loaded now, never evicted, counted against the
    /// budget. Pinned bytes alone may not exceed the budget. Memory shared with code outside
    /// the library stays write-through: it is never held on the device past an op, pinned or
    /// not (a pin of it does nothing, and exporting a pinned storage ends its pin), so the
    /// outside's writes are seen at the next op and ours before the op returns.
    pub(crate) fn pin(&mut self, entry: &Entry, pinned: bool) -> Result<()> {
        let id = self.storage_of(entry)?;
        self.pin_storage(id, pinned)
    }

    pub(in crate::residency) fn pin_storage(&mut self, id: u64, pinned: bool) -> Result<()> {
        let s = &self.storages[&id];
        if pinned && matches!(s.kind, Home::External { .. }) {
            return Ok(());
        }
        let (bytes, was_pinned) = (s.bytes, s.pinned);
        if was_pinned == pinned {
            return Ok(());
        }
        if !pinned {
            self.storages.get_mut(&id).expect("registered").pinned = false;
            self.stats.pinned_bytes -= bytes;
            crate::residency::core::room::freed();
            return Ok(());
        }
        if self.policy.bounded() && self.stats.pinned_bytes + bytes > self.cfg.budget_bytes {
            return Err(Error::BudgetTooSmall { op: "pin_resident".into(), needed: self.stats.pinned_bytes + bytes, budget: self.cfg.budget_bytes });
        }
        // Counted from here, so that no result is dropped whose remake would not fit beside it.
        self.stats.pinned_bytes += bytes;
        // Whether it is resident is asked after the remakes, which may have made it (an input of
        // a crowded result) or evicted it.
        let brought = self.remake_crowded().and_then(|()| match self.storages[&id].resident() {
            true => Ok(()),
            false => self.bring(id, "pin_resident", EventKind::Load),
        });
        if let Err(e) = brought {
            self.stats.pinned_bytes -= bytes;
            return Err(e);
        }
        self.storages.get_mut(&id).expect("registered").pinned = true;
        Ok(())
    }

    /// Starts writing every newer device copy home and drops every device copy (before
    /// reconfiguring). It cannot fail for want of room: pins end first, everything on the device
    /// leaves (a clean copy for free), and then each dropped result is made again in the order
    /// it was first made (a recipe's inputs are older than its result, so each is home again
    /// before its dependents need it), needing only its own working set, which `keep_recipe`
    /// holds to the budget. Nothing is dropped from here on. Returns the write-backs to wait for
    /// once the lock is released.
    pub(crate) fn drain(&mut self) -> Result<Vec<Arc<Transfer>>> {
        self.cfg.recompute = Recompute::Off;
        self.storages.values_mut().for_each(|s| s.pinned = false);
        self.stats.pinned_bytes = 0;
        self.evict_all("drain")?;
        let mut dropped: Vec<u64> = self.storages.iter().filter(|(_, s)| s.dropped()).map(|(&id, _)| id).collect();
        dropped.sort_unstable();
        for id in dropped {
            self.remake_if_dropped(id, "drain")?;
        }
        self.evict_all("drain")?;
        self.freeing = Default::default(); // no copy is left to need its room: the allocator frees it in time
        self.owed.clear();
        self.free_retired();
        Ok(self.storages.values_mut().filter_map(Storage::pending_write).collect())
    }

    /// Evicts every device copy the manager counts, oldest first (one a running op uses too: a
    /// drain runs while no op does).
    pub(in crate::residency) fn evict_all(&mut self, op: &'static str) -> Result<()> {
        let mut ids: Vec<u64> = self.storages.iter().filter(|(_, s)| s.resident() && s.counted()).map(|(&id, _)| id).collect();
        ids.sort_unstable();
        ids.into_iter().try_for_each(|id| self.evict(id, op))
    }
}

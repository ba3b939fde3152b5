//! Memory the outside can reach (DLPack imports and exports) seen as the memory it is. Two
//! imports of one torch tensor, or an import of an exported view, are StorageImpls of their own
//! over the same bytes, so the manager knows them as separate storages. An op must see them as
//! plain libtorch does: one memory, where a write through one is read through the other within
//! the same kernel.
//!
//! So while an op uses it, an external storage whose bytes lie inside another external storage's
//! (the outermost such, `outer_memory`) has no device copy of its own: it views the outer one's,
//! through a StorageImpl of its own over the same device bytes (`crate::residency::torch_storage::alias_bytes`), which
//! keeps the outer copy alive. The outer storage is held for as long, and a write through the
//! inner one makes the outer copy the newer one, written home when the op ends like any external
//! write. An inner storage loaded with a copy of its own before the outer one was known (both
//! first used by one op) makes that op run again (`RoomTaken`), which then finds the outer one.
//!
//! Storages that overlap without one holding the other are still copied apart (see
//! docs/residency.md).

use crate::residency::core::manager::Manager;
use crate::residency::core::storage::{Home, Storage};
use crate::residency::torch_storage::StorageRef;
use crate::error::{Error, Result};

/// The bytes of external memory a storage's home spans, if it is external and not empty.
fn span(s: &Storage) -> Option<(usize, usize)> {
    if !matches!(s.kind, Home::External { .. }) || s.bytes == 0 {
        return None;
    }
    let start = s.home.data_ptr();
    Some((start, start + s.bytes as usize))
}

impl Manager {
    /// The outermost external storage whose bytes hold `id`'s, and where `id`'s bytes start in
    /// it, unless that is `id` itself. Of several spanning the same bytes the first registered
    /// is the outer one, so that the choice is the same from each of them.
    pub(in crate::residency) fn outer_memory(&self, id: u64) -> Option<(u64, usize)> {
        let (start, end) = span(&self.storages[&id])?;
        let (outer, outer_start, _) = self
            .storages
            .iter()
            .filter_map(|(&other, s)| span(s).map(|(lo, hi)| (other, lo, hi)))
            .filter(|&(_, lo, hi)| lo <= start && end <= hi)
            .max_by_key(|&(other, lo, hi)| (hi - lo, std::cmp::Reverse(other)))?;
        (outer != id).then_some((outer, start - outer_start))
    }

    /// Gives `id` (not on the device, its outer storage held by the running op) a view of the
    /// outer storage's device copy over its own bytes.
    pub(in crate::residency) fn alias_within(&mut self, id: u64, outer: u64, offset: usize) -> Result<()> {
        let device = self.storages[&outer].device.as_ref().expect("the outer storage is held on the device").bytes()?;
        let s = self.storages.get_mut(&id).expect("registered");
        s.within = Some(outer);
        let alias = crate::residency::torch_storage::alias_bytes(&device, offset, s.bytes)?;
        crate::residency::autograd::share_version(&alias, &s.home.bytes()?)?;
        let alias = StorageRef::of(&alias)?;
        self.by_device.insert(alias.id(), id);
        s.device = Some(alias);
        Ok(())
    }

    /// Before external `id` is loaded with a copy of its own: no storage inside its bytes may
    /// have a device copy of its own, which the op would read apart from `id`'s. Such a copy was
    /// loaded before `id` was known to hold it: the op lets go of everything and runs again.
    pub(in crate::residency) fn no_copy_inside(&self, id: u64, op: &'static str) -> Result<()> {
        let Some((start, end)) = span(&self.storages[&id]) else { return Ok(()) };
        let inside = self.storages.iter().any(|(&other, s)| {
            other != id && s.resident() && s.within.is_none() && span(s).is_some_and(|(lo, hi)| start <= lo && hi <= end)
        });
        match inside {
            true => Err(Error::RoomTaken { op: op.to_string(), freed: crate::residency::core::room::freed_so_far() }),
            false => Ok(()),
        }
    }

    /// When the running ops no longer use `id`, a view of its outer storage's copy: the view
    /// goes (the outer storage, written if the op wrote through `id`, is let go by the caller).
    pub(in crate::residency) fn end_alias(&mut self, id: u64) {
        let s = self.storages.get_mut(&id).expect("registered");
        if s.in_use == 0 {
            s.within = None;
            if let Some(device) = s.device.take() {
                self.by_device.remove(&device.id());
                self.window_epoch += 1;
            }
        }
    }
}

//! Room in the budget: evicting until bytes fit (a clean copy is dropped for free, a newer one
//! written back asynchronously, a result with a recipe dropped), why they cannot, what may
//! leave (`candidates`, chosen among by the policy), and waiting for the device to finish with
//! the copies let go of before their room is taken again (`device::freeing`).

use crate::error::{Error, Result};
use crate::residency::core::manager::{Manager, HOLDS};
use crate::residency::core::report::EventKind;
use crate::residency::core::homes::pin_home;
use crate::residency::core::storage::{page_locked, Home, Storage};
use crate::residency::device::memory;
use crate::residency::device::Device;
use crate::residency::torch_storage::StorageRef;
use crate::residency::policy::Candidate;
use std::sync::Arc;
use std::time::Instant;

impl Manager {
    /// Evicts until `bytes` more fit in the budget. Where they cannot, even with every copy
    /// that may leave gone (then nothing is evicted), says why: the op's own holds, the pins and
    /// `bytes` exceed the budget (`BudgetTooSmall`, with what the op needs by itself), or other
    /// running ops hold the rest (`RoomTaken`: the op waits and runs again).
    /// Then waits, where it must, for the device to finish with copies let go of (`await_freed`).
    pub(in crate::residency) fn make_room(&mut self, bytes: u64, op: &'static str) -> Result<()> {
        if !self.policy.bounded() {
            return Ok(());
        }
        if self.used() + bytes > self.cfg.budget_bytes {
            self.evict_for(bytes, op)?;
        }
        self.await_freed(bytes)
    }

    /// Evicts policy-chosen victims until `bytes` more fit beside the storages (see `make_room`).
    fn evict_for(&mut self, bytes: u64, op: &'static str) -> Result<()> {
        // Listing the candidates asks libtorch about each copy on the device (`held_outside`), so
        // the list the check makes serves the first pick too. After an eviction it is made again:
        // what the others cost to evict can change (a recipe's inputs left).
        let candidates = self.candidates();
        let leaving: u64 = candidates.iter().map(|c| c.bytes).sum();
        if self.used().saturating_sub(leaving) + bytes > self.cfg.budget_bytes {
            return Err(self.no_room(bytes, op));
        }
        let mut first = Some(candidates);
        while self.used() + bytes > self.cfg.budget_bytes {
            let candidates = first.take().unwrap_or_else(|| self.candidates());
            let Some(victim) = self.policy.pick_victim(&candidates, self.clock, &self.trace) else {
                return Err(self.no_room(bytes, op));
            };
            self.evict(victim, op)?;
        }
        Ok(())
    }

    /// A running op's kernel was granted room for `bytes` (on the simulated device): Flow's trace
    /// keeps what kernels hold in flight at each op, to leave it free when it prefetches.
    pub(in crate::residency) fn kernel_allocates(&mut self, bytes: u64) {
        if self.policy.prefetches() {
            self.trace.kernels_held(self.in_flight().in_flight + bytes);
        }
    }

    /// The device bytes counted against the budget: the storages', the room reserved for running
    /// ops' outputs (see `outputs`), and on the simulated device what running kernels allocated
    /// that is not a storage yet (see `device_memory`).
    pub(in crate::residency) fn used(&self) -> u64 {
        self.stats.device_bytes + self.reserved + self.in_flight().in_flight
    }

    pub(in crate::residency) fn in_flight(&self) -> memory::DeviceMemory {
        match self.cfg.device {
            Device::Simulated => memory::device_memory(false),
            _ => memory::DeviceMemory::default(),
        }
    }

    /// Why `bytes` more do not fit (see `make_room`).
    pub(in crate::residency) fn no_room(&self, bytes: u64, op: &'static str) -> Error {
        let mut own = HOLDS.with(|h| h.borrow().clone());
        own.sort_unstable();
        own.dedup();
        let held = |id: &u64| self.storages.get(id).filter(|s| s.resident() && s.counted() && !s.pinned).map_or(0, |s| s.bytes);
        // What backward's nodes hold of what they unpacked: counted as this thread's (another
        // thread's would be freed soon; this one's, waited for, never would).
        let outside = |s: &&Storage| s.in_use == 0 && s.counted() && !s.pinned && s.held_outside();
        let lent: u64 = self.storages.values().filter(outside).map(|s| s.bytes).sum();
        let flight = self.in_flight();
        let needed = own.iter().map(held).sum::<u64>() + lent + self.stats.pinned_bytes + flight.in_flight_here + bytes;
        let others = flight.in_flight > flight.in_flight_here
            || self.reserved > 0
            || self.storages.iter().any(|(id, s)| s.resident() && s.in_use > 0 && own.binary_search(id).is_err());
        if needed <= self.cfg.budget_bytes && others {
            Error::RoomTaken { op: op.to_string(), freed: crate::residency::core::room::freed_so_far() }
        } else {
            Error::BudgetTooSmall { op: op.to_string(), needed, budget: self.cfg.budget_bytes }
        }
    }

    /// The storages that may be evicted now, oldest first (so that a policy's ties are broken the
    /// same way in every run, not by the map's order). One that would be dropped to be made again
    /// counts as clean: evicting it costs no write-back.
    pub(in crate::residency) fn candidates(&self) -> Vec<Candidate> {
        let mut candidates: Vec<Candidate> = self
            .storages
            .iter()
            .filter(|(_, s)| s.evictable())
            .map(|(&uid, s)| Candidate { uid, bytes: s.bytes, dirty: s.dirty && !self.droppable(uid), last_use: s.last_use, uses: s.uses, key: s.key })
            .collect();
        candidates.sort_unstable_by_key(|c| c.uid);
        candidates
    }

    /// Starts copying a newer device copy home. A home without memory gets memory first,
    /// page-locked unless the configuration says not to; so does, with the configuration's
    /// page-locking on, the pageable home of a storage registered never written (the only
    /// pageable home of ours left then: `add_storage`), in place of its pageable memory. The
    /// home may be read once the write-back has finished; memory the outside can reach is waited
    /// for before the running op returns.
    pub(in crate::residency) fn write_home(&mut self, id: u64, op: &'static str) -> Result<()> {
        let started = Instant::now();
        let (cuda, pin) = (self.cuda(), self.cfg.pin_host_memory);
        let on = self.cfg.device;
        let s = self.storages.get_mut(&id).expect("registered");
        let Some(device) = s.device.as_ref().filter(|_| s.dirty) else { return Ok(()) };
        let (device, home) = (device.bytes()?, s.home.bytes()?);
        let mut new_memory = 0;
        if s.kind == Home::Lazy {
            new_memory = page_locked(on, || crate::residency::torch_storage::home_allocate(&home, pin, cuda))?.1;
            s.kind = if pin { Home::PageLocked } else { Home::Pageable };
        } else if s.kind == Home::Pageable && pin {
            new_memory = pin_home(s, on, false)?;
        }
        let transfer = Arc::new(self.cfg.device.write_back(&device, &home)?);
        if matches!(s.kind, Home::External { .. }) {
            self.owed.push(transfer.clone());
        }
        s.writing = Some(transfer);
        s.written_home = true;
        let (bytes, pageable, modified) = (s.bytes, s.kind.pageable(), s.modified);
        (s.dirty, s.modified) = (false, false);
        self.stats.count_page_locked(new_memory, bytes);
        if pageable {
            self.stats.pageable_copies += 1;
            self.stats.pageable_copy_bytes += bytes;
        }
        if !modified {
            self.stats.needless_write_backs += 1;
        }
        self.stats.write_backs += 1;
        self.stats.write_back_bytes += bytes;
        if let Some(log) = &mut self.schedule {
            log.write_back(id, bytes);
        }
        self.event(EventKind::WriteBack, id, bytes, op, Some(started));
        Ok(())
    }

    /// Drops the device copy, writing it home first if it is the newer one, unless it is a
    /// result better made again (`droppable`). On a failed write-back the copy stays where it
    /// was: nothing is lost. The device may still use the copy's memory (`free_copy`).
    pub(in crate::residency) fn evict(&mut self, id: u64, op: &'static str) -> Result<()> {
        let dropping = self.droppable(id);
        if !dropping {
            self.write_home(id, op)?;
            self.trace.evicted(self.storages[&id].key);
        }
        let s = self.storages.get_mut(&id).expect("victim is registered");
        let device = s.device.take().expect("victim is resident");
        self.window_epoch += 1;
        self.by_device.remove(&device.id());
        s.loading = None; // a prefetch never used: its memory belongs to the load stream
        (s.prefetched, s.written_ahead) = (false, false);
        let (bytes, role) = (s.bytes, s.role);
        let used = (std::mem::take(&mut s.read_on_compute), std::mem::take(&mut s.written_home));
        self.free_copy(device, bytes, used.0, used.1);
        self.stats.device_bytes -= bytes;
        self.device_by_role.sub(role, bytes);
        self.stats.evictions += 1;
        self.stats.evicted_bytes += bytes;
        if dropping {
            self.stats.drops += 1;
            self.stats.dropped_bytes += bytes;
        }
        if let Some(log) = &mut self.schedule {
            log.evict(id);
        }
        self.event(if dropping { EventKind::Drop } else { EventKind::Evict }, id, bytes, op, None);
        Ok(())
    }

    /// Lets go of a storage's device copy (`bytes`, counted until now), evicted or forgotten: it
    /// stays counted while the device may still use it (see `device::freeing`).
    /// `read_on_compute` and `written_home` are the storage's flags for the copy.
    pub(in crate::residency) fn free_copy(&mut self, copy: StorageRef, bytes: u64, read_on_compute: bool, written_home: bool) {
        if self.policy.bounded() {
            self.freeing.push(self.cfg.device, copy, bytes, read_on_compute, written_home, self.clock);
        }
    }

    /// Before `bytes` of device memory are allocated into room the storages leave in the budget:
    /// waits, oldest first, for the device to finish with the copies let go of until the
    /// allocation fits beside them (the one wait for the GPU under the manager's lock: the host
    /// has run as far ahead of the device as the budget lets it). Asks the device which it has
    /// finished with only when they are in the way: an op with room to spare queries no event.
    /// (Nothing is freeing under a policy without a budget: `free_copy` counts nothing there.)
    pub(in crate::residency) fn await_freed(&mut self, bytes: u64) -> Result<()> {
        let fits = |m: &Manager| m.used() + m.freeing.bytes() + bytes <= m.cfg.budget_bytes;
        if self.freeing.bytes() == 0 || fits(self) {
            return Ok(());
        }
        self.freeing.reclaim(self.clock);
        if fits(self) {
            return Ok(());
        }
        let started = Instant::now();
        while self.freeing.bytes() > 0 && !fits(self) {
            self.freeing.wait_oldest()?;
        }
        self.stats.freeing_waits += 1;
        self.stats.freeing_wait_ns += started.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// Evicts the results a policy keeps none of, but those another running op still holds.
    pub(crate) fn evict_unkept(&mut self, op: &'static str) {
        for id in std::mem::take(&mut self.unkept) {
            match self.storages.get(&id) {
                // Even if the write-back failed: the copy then stays on the device (nothing lost).
                Some(s) if s.evictable() => drop(self.evict(id, op)),
                Some(s) if s.resident() => self.unkept.push(id),
                _ => {}
            }
        }
    }

    /// Evicts every device copy no running op uses (out-of-memory recovery). Returns the count.
    pub(crate) fn evict_unused(&mut self) -> usize {
        let victims: Vec<u64> = self.candidates().iter().map(|c| c.uid).collect();
        victims.iter().filter(|&&id| self.evict(id, "out-of-memory recovery").is_ok()).count()
    }
}

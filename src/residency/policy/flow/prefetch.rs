//! Flow's prefetch: once a recorded iteration is being followed, the loads of the next uses are
//! started ahead, so the copy engine stays busy while the compute engine works: weights and
//! inputs, and in backward the activations autograd saved in forward.

use crate::residency::core::manager::Manager;
use crate::residency::core::report::EventKind;
use crate::residency::core::storage::{Home, Storage};
use crate::residency::policy::flow::trace::{Ahead, TraceKey};
use crate::residency::policy::Candidate;

impl Manager {
    /// Starts loading the storages the next recorded ops read, so the copy engine stays busy
    /// while the compute engine works. Free room in the budget is filled as far ahead as it
    /// goes; beyond it, a prefetch evicts only within a window of two and a half times the
    /// largest storage ahead (double buffering, one copy arriving while the next is being read,
    /// with slack for smaller storages read beside them), because every
    /// eviction further ahead would throw out a storage the recorded order keeps resident for
    /// the next iteration, and load it again. A storage is fetched only if it fits beside every
    /// op that runs before its use (its inputs, and what its kernels hold: its result and their
    /// scratch, as the followed iteration's kernels held them), and if the most those ops'
    /// kernels hold fits beside it in room that is free or held by copies used after it and not
    /// prefetched, dirty or clean, which a kernel's room takes first (see
    /// `Trace::prefetch_plan`): else the kernel would evict the prefetched copy, fetched again
    /// after the op, once per op (in backward, once per node). It evicts only clean copies
    /// needed later than itself (a speculative load never costs a write-back, nor a remake),
    /// never another prefetch, and never a copy written ahead (it leaves where the followed
    /// order evicts it: taken earlier, it is loaded back more often). A dropped result is not
    /// fetched: it is made again at its use.
    /// Errors stop the prefetch; the op then loads what it needs.
    ///
    /// A pass that went through the whole window (nothing left it wanting room) is not made again
    /// while no storage has left the device or come new to the manager since (`Manager::window_epoch`):
    /// every input in the window then stays resident or passed over, and results made since are
    /// on the device. Only the inputs of the ops that entered the window are looked at, and the
    /// whole pass is made again if one of them is not on the device. While the program follows
    /// an iteration with everything resident, this is a few lookups an op instead of one for
    /// every input of the window (256 ops by default).
    pub(in crate::residency) fn prefetch(&mut self) {
        if !self.trace.following() {
            return; // no recorded order to fetch ahead of
        }
        if let Some(done) = self.window_done.take().filter(|done| done.epoch == self.window_epoch) {
            if let Some(mut entered) = self.trace.entered_since(&done, self.cfg.prefetch_depth) {
                if entered.all(|key| self.storage_for(key).map_or(true, |id| !self.wants_load(id))) {
                    self.window_done = Some(self.trace.window_done(done.epoch));
                    return;
                }
            }
        }
        if self.prefetch_window() {
            self.window_done = Some(self.trace.window_done(self.window_epoch));
        }
    }

    /// A storage a prefetch would load: one not on the device that has something to load.
    fn wants_load(&self, id: u64) -> bool {
        self.storages.get(&id).is_some_and(|s| !s.resident() && !Self::passed_over(s))
    }

    /// A storage no prefetch loads: pinned, not counted, dropped, never written (it gets device
    /// memory at its use) or external.
    fn passed_over(s: &Storage) -> bool {
        s.pinned || !s.counted() || s.dropped() || s.fresh || matches!(s.kind, Home::External { .. })
    }

    /// One pass over the window (see `prefetch`); returns whether it went through all of it.
    fn prefetch_window(&mut self) -> bool {
        let (mut plan, mut largest) = (std::mem::take(&mut self.prefetch_plan), 0);
        plan.clear();
        self.trace.prefetch_plan(self.cfg.prefetch_depth, |key, ahead| {
            let Some(id) = self.storage_for(key) else { return };
            largest = largest.max(self.storages.get(&id).map_or(0, |s| s.bytes));
            plan.push((id, ahead));
        });
        let through = self.prefetch_planned(&plan, 5 * largest / 2);
        self.prefetch_plan = plan;
        through
    }

    /// Loads the plan's storages in order while they fit, evicting for them only within `window`
    /// bytes of copies fetched ahead; returns whether it went through the whole plan.
    fn prefetch_planned(&mut self, plan: &[(u64, Ahead)], window: u64) -> bool {
        let room = self.cfg.budget_bytes.saturating_sub(self.stats.pinned_bytes);
        let (mut committed, mut ahead) = (0, 0);
        for &(id, Ahead { working_set, results }) in plan {
            let Some(s) = self.storages.get(&id) else { continue };
            if Self::passed_over(s) {
                continue;
            }
            let bytes = s.bytes;
            if s.resident() {
                ahead += if s.prefetched { bytes } else { 0 };
                continue;
            }
            let wanted = self.trace.next_use(s.key);
            let fits_free = self.used() + bytes <= self.cfg.budget_bytes;
            if committed + bytes + working_set > room || (!fits_free && ahead + bytes > window) {
                return false;
            }
            let over = |beside: u64| (self.used() + bytes + beside).saturating_sub(self.cfg.budget_bytes);
            if over(results) > 0 && !self.may_free(over(0), over(results), wanted) {
                return false;
            }
            // The copies this prefetch may evict, listed only when it must evict: most prefetches
            // that are short of free room for the largest result still fit themselves.
            let mut later: Option<Vec<Candidate>> = None;
            while self.used() + bytes > self.cfg.budget_bytes {
                let later = later.get_or_insert_with(|| {
                    self.candidates().into_iter().filter(|c| self.gives_way(&self.storages[&c.uid], wanted)).collect()
                });
                match self.policy.pick_victim(later, self.clock, &self.trace) {
                    Some(victim) if self.evict(victim, "prefetch").is_ok() => later.retain(|c| c.uid != victim),
                    _ => return false,
                }
            }
            if self.await_freed(bytes).is_err() || self.load(id, "prefetch", EventKind::Prefetch).is_err() {
                return false;
            }
            committed += bytes;
            ahead += bytes;
        }
        true
    }

    /// Whether a prefetch of a storage needed at op `wanted` may evict `s`, already a candidate:
    /// a clean copy (no write-back, no remake), not written ahead, that leaves before it
    /// (`leaves_before`).
    fn gives_way(&self, s: &Storage, wanted: u64) -> bool {
        Self::free_to_take(s) && self.leaves_before(s, wanted)
    }

    /// A copy a prefetch may take room from: clean, and not written ahead (which leaves where the
    /// followed order evicts it: taken earlier, it is loaded back more often).
    fn free_to_take(s: &Storage) -> bool {
        !s.dirty && !s.written_ahead
    }

    /// Whether `s` leaves before a copy prefetched for op `wanted` when room is made: it is not
    /// itself prefetched, and it is needed later.
    fn leaves_before(&self, s: &Storage, wanted: u64) -> bool {
        !s.prefetched && self.trace.next_use(s.key) > wanted
    }

    /// Whether the copies that leave before a prefetch needed at op `wanted` hold `beside` bytes
    /// or more, and those that give way to it `short` or more: the prefetch evicts these for
    /// its own room, and the kernels of the ops before its use take theirs from any of them (a
    /// dirty one written back), not from the prefetched copy. Counts in the table's order and
    /// stops once they do: the candidates' list, sorted, which asks libtorch about every copy on
    /// the device, is made only to evict.
    fn may_free(&self, short: u64, beside: u64, wanted: u64) -> bool {
        let (mut giving_way, mut leaving) = (0, 0);
        // (`resident` first: it spares the others' trace lookups; `evictable` last: it asks libtorch.)
        self.storages.values().filter(|s| s.resident() && self.leaves_before(s, wanted) && s.evictable()).any(|s| {
            leaving += s.bytes;
            giving_way += if Self::free_to_take(s) { s.bytes } else { 0 };
            giving_way >= short && leaving >= beside
        })
    }

    /// The storage a trace key names: a persistent one by its id, a result of this iteration by
    /// the op that made it.
    fn storage_for(&self, key: TraceKey) -> Option<u64> {
        match key {
            TraceKey::Persistent(id) => Some(id),
            TraceKey::Produced { .. } => self.by_key.get(&key).copied(),
        }
    }
}

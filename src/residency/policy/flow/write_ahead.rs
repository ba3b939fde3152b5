//! Flow's write-ahead: while the recorded order is followed, a storage the op made or wrote that
//! the recorded iteration evicted starts its write-back as the op ends, or, where the op that
//! uses it next, soon, writes it again, once that op has.

use crate::residency::core::manager::Manager;
use crate::residency::core::storage::Home;

impl Manager {
    /// While Flow follows the recorded order, each storage the op made or wrote that the
    /// recorded iteration evicted starts its write-back now, and stays on the device, clean: it
    /// will leave as it did then, and leaving then costs nothing. The write-backs run while the
    /// producing ops do, rather than queueing up where memory runs out, late in the forward pass,
    /// ahead of the reloads backward needs first. A failure leaves the write-back to the
    /// eviction.
    ///
    /// A storage whose next use, in the recorded order and within the ops the prefetch looks
    /// ahead, writes it again waits (`write_ahead_later`) until one does not: written ahead
    /// before, its bytes would cross twice (Adam's `exp_avg_sq`, scaled by `_foreach_mul_`, then
    /// added to by `_foreach_addcmul_`). One written again only further on (a gradient zeroed
    /// in the next step) is written ahead now: it is evicted before then, and waiting would
    /// move its write-back there, among the loads (the op table's encoder at a quarter modelled
    /// 1.75x so, 1.60x without waiting).
    pub(in crate::residency) fn write_ahead(&mut self, op: &'static str) {
        if self.policy.prefetches() && self.trace.following() {
            let mut written = std::mem::take(&mut self.written_now);
            written.append(&mut self.write_ahead_later);
            written.sort_unstable();
            written.dedup();
            for &id in &written {
                let Some(s) = self.storages.get(&id) else { continue };
                let eligible = s.resident() && s.dirty && s.in_use == 0 && !s.pinned && s.counted() && !matches!(s.kind, Home::External { .. });
                if !eligible || self.droppable(id) || !self.trace.evicted_last_time(s.key) {
                    continue;
                }
                if self.trace.next_use_writes(s.key, self.cfg.prefetch_depth as u64) {
                    self.write_ahead_later.push(id);
                } else if self.write_home(id, op).is_ok() {
                    self.storages.get_mut(&id).expect("written above").written_ahead = true;
                }
            }
            self.written_now = written; // its capacity serves the next op
        } else {
            self.write_ahead_later.clear();
        }
        self.written_now.clear();
    }
}

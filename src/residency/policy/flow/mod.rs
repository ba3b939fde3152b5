//! Flow: results stay on the device; over budget the manager evicts. Until an iteration has been
//! recorded, the victim is the tensor that is cheapest to lose by a score of recency, frequency,
//! size and reload cost (DTR's cost / (bytes x staleness), with a dirty copy costing a write-back
//! too). Once the trace is recorded and the program follows it, the victim is the tensor whose
//! next use is furthest away (Belady), and the manager prefetches the next uses.

pub(in crate::residency) mod prefetch;
pub(in crate::residency) mod trace;
mod write_ahead;

use super::{Candidate, Rules};
use trace::Trace;

pub(crate) struct Flow;

impl Flow {
    /// Lower is a better victim: reload cost (bytes, doubled when a write-back is needed first)
    /// times how often it was used, over bytes freed times staleness.
    fn score(c: &Candidate, now: u64) -> f64 {
        let reload = c.bytes as f64 * if c.dirty { 2.0 } else { 1.0 };
        let staleness = (now.saturating_sub(c.last_use) + 1) as f64;
        reload * (1 + c.uses) as f64 / (c.bytes.max(1) as f64 * staleness)
    }
}

impl Rules for Flow {
    fn keeps_results(&self) -> bool {
        true
    }
    fn prefetches(&self) -> bool {
        true
    }
    fn pick_victim(&self, candidates: &[Candidate], now: u64, trace: &Trace) -> Option<u64> {
        if trace.following() {
            // Furthest next use; among ties (e.g. never used again) a clean copy (free to drop),
            // then the larger (frees more).
            return candidates.iter().max_by_key(|c| (trace.next_use(c.key), !c.dirty, c.bytes)).map(|c| c.uid);
        }
        candidates
            .iter()
            .min_by(|a, b| Self::score(a, now).total_cmp(&Self::score(b, now)))
            .map(|c| c.uid)
    }
}

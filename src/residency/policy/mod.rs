//! The one small trait every residency policy implements, and what it sees of a resident tensor.

pub(super) mod flow;
mod genoa;
mod resident;

use flow::trace::{Trace, TraceKey};
use tensorref_derive::CEnum;

/// Which policy the residency manager runs.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, CEnum)]
#[c_enum(what = "policy")]
pub enum Policy {
    /// Everything on the compute device; no budget.
    Resident = 0,
    /// Inputs to the device before each op; results and inputs back right after.
    Genoa = 1,
    /// Results stay; evict on demand (by score, or by next use once a trace is recorded) and
    /// prefetch the next uses.
    Flow = 2,
}

/// A resident tensor that may be evicted now (not pinned, not used by a running op).
pub(crate) struct Candidate {
    pub(crate) uid: u64,
    pub(crate) bytes: u64,
    pub(crate) dirty: bool,
    pub(crate) last_use: u64,
    pub(crate) uses: u64,
    pub(crate) key: TraceKey,
}

pub(crate) trait Rules: Send {
    /// Whether the device budget applies.
    fn bounded(&self) -> bool {
        true
    }
    /// Whether op results stay on the device (else they are written back at once).
    fn keeps_results(&self) -> bool;
    /// Whether inputs leave the device right after each op.
    fn drops_inputs_after_op(&self) -> bool {
        false
    }
    /// Whether the manager should prefetch the recorded trace's next uses.
    fn prefetches(&self) -> bool {
        false
    }
    /// The candidate to evict next. `now` is the manager's op clock.
    fn pick_victim(&self, candidates: &[Candidate], now: u64, trace: &Trace) -> Option<u64>;
}

impl Policy {
    /// The policy's rules.
    pub(crate) fn rules(self) -> Box<dyn Rules> {
        match self {
            Policy::Resident => Box::new(resident::Resident),
            Policy::Genoa => Box::new(genoa::Genoa),
            Policy::Flow => Box::new(flow::Flow),
        }
    }
}

/// Least recently used first; the fallback of every policy.
pub(crate) fn least_recent(candidates: &[Candidate]) -> Option<u64> {
    candidates.iter().min_by_key(|c| c.last_use).map(|c| c.uid)
}

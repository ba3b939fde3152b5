//! Resident: every tensor used by an op stays on the compute device. The baseline; no budget.

use crate::residency::policy::{Candidate, Rules};
use crate::residency::policy::flow::trace::Trace;

pub(crate) struct Resident;

impl Rules for Resident {
    fn bounded(&self) -> bool {
        false
    }
    fn keeps_results(&self) -> bool {
        true
    }
    fn pick_victim(&self, _: &[Candidate], _: u64, _: &Trace) -> Option<u64> {
        None
    }
}

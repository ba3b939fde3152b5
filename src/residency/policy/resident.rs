//! Resident: every tensor used by an op stays on the compute device. The baseline; no budget.

use crate::residency::policy::{Candidate, Policy};
use crate::residency::policy::flow::trace::Trace;

pub(crate) struct Resident;

impl Policy for Resident {
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

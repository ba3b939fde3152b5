//! Genoa (torch.TensorRef's strategy): inputs go to the device just before each op; the result
//! is written back and every device copy is dropped right after. Minimal device memory,
//! maximal traffic.

use crate::residency::policy::{least_recent, Candidate, Rules};
use crate::residency::policy::flow::trace::Trace;

pub(crate) struct Genoa;

impl Rules for Genoa {
    fn keeps_results(&self) -> bool {
        false
    }
    fn drops_inputs_after_op(&self) -> bool {
        true
    }
    fn pick_victim(&self, candidates: &[Candidate], _: u64, _: &Trace) -> Option<u64> {
        least_recent(candidates)
    }
}

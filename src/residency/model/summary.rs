//! The schedule model of one logged iteration as the C ABI hands it out (`tr_schedule_model`):
//! its replay at the manager's rates beside what it moved.

use super::pass::Pass;
use crate::residency::training::costs::Rates;

/// The schedule model of the last iteration the manager logged (`tr_residency_schedule_model`),
/// in seconds at the rates the manager prices with: an H100's on the simulated device; on CUDA,
/// the GPU's as measured when the manager starts under recompute "cheaper", else an H100's.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScheduleModel {
    /// The iteration's time with its copies, waits and results made again: a lower bound of what
    /// it takes on a GPU at these rates.
    pub step_s: f64,
    /// The same iteration with nothing moved or made again (every tensor resident).
    pub unmanaged_s: f64,
    /// What no schedule of these copies and ops beats: max(bytes loaded, bytes written back) over
    /// the link's bandwidth, or the kernels' time, whichever is more.
    pub bound_s: f64,
    /// Bytes loaded onto the device in the iteration, prefetches included.
    pub loaded_bytes: u64,
    /// Bytes written back to host memory in the iteration.
    pub written_bytes: u64,
}

impl ScheduleModel {
    /// `pass` replayed at `rates`, its products counting elements of `elem` bytes.
    pub(crate) fn of(pass: &Pass, rates: Rates, elem: usize) -> ScheduleModel {
        let r = rates.replay(pass, elem);
        ScheduleModel {
            step_s: r.makespan,
            unmanaged_s: r.unmanaged,
            bound_s: r.bound,
            loaded_bytes: pass.loaded_bytes(),
            written_bytes: pass.written_bytes(),
        }
    }
}

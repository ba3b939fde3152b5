//! The replay of a logged pass on a copy engine for each direction and a compute engine (the
//! rules: the module `model`).

use super::pass::{Pass, Step, Work};
use crate::residency::training::costs::{op_costs, Rates};
use std::collections::HashMap;

/// The replay of one pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replay {
    /// Seconds per pass: the pass replayed `REPEATS` times back to back (copies a pass starts for
    /// the next one then overlap the next one, as on the device), from the start until every
    /// op and copy has ended, over `REPEATS`. All of each pass's work lies in that window, so no
    /// replay beats the bound; the first pass, with nothing from a pass before it, weighs
    /// 1/`REPEATS`.
    pub makespan: f64,
    /// max(loaded bytes / bandwidth, written bytes / bandwidth, compute time) of one pass: no
    /// schedule of these copies and ops is faster.
    pub bound: f64,
    /// The copy engines' busy time, both directions summed.
    pub copy_busy: f64,
    /// The compute engine's busy time, results made again included.
    pub compute_busy: f64,
    /// The compute time of the pass without the results made again: the pass with everything
    /// resident, nothing moved or remade.
    pub unmanaged: f64,
}

impl Replay {
    /// bound / makespan: 1.0 is a perfect overlap.
    pub fn efficiency(&self) -> f64 {
        if self.makespan > 0.0 { self.bound / self.makespan } else { 1.0 }
    }

    /// makespan / unmanaged: how much slower the managed pass is than the same pass with
    /// everything resident.
    pub fn slowdown(&self) -> f64 {
        if self.unmanaged > 0.0 { self.makespan / self.unmanaged } else { 1.0 }
    }
}

/// How many times a pass is replayed back to back.
const REPEATS: usize = 16;

/// Replays `pass` with copy engines of `bandwidth` bytes per second and `compute(op)` seconds
/// per op (see the module's rules).
pub fn replay(pass: &Pass, bandwidth: f64, compute: impl Fn(&Step) -> f64) -> Replay {
    let costs = op_costs(pass, &compute);
    // When the host issues the next step, when each side stream is free for its next copy, the
    // host-to-device engine.
    let (mut host, mut load_free, mut write_free, mut compute_free) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut to_device = Engine::default();
    let mut op_end: Vec<f64> = vec![];
    let (mut loaded, mut written): (HashMap<u64, f64>, HashMap<u64, f64>) = (HashMap::new(), HashMap::new());
    for _ in 0..REPEATS {
        let first_op = op_end.len() as isize;
        // When op `after` (of this pass, or negative: of the one before) ended; 0 before the first.
        let ended = |ends: &[f64], after: Option<isize>| {
            after.and_then(|a| usize::try_from(first_op + a).ok()).and_then(|i| ends.get(i).copied()).unwrap_or(0.0)
        };
        for step in &pass.steps {
            match step {
                Step::HostWait { after } => host = host.max(ended(&op_end, Some(*after))),
                Step::Load { storage, bytes, after } => {
                    let (room, length) = (ended(&op_end, *after).max(host), *bytes as f64 / bandwidth);
                    let end = match written.get(storage) {
                        Some(&home_ready) if home_ready > load_free.max(room) => {
                            write_free = to_device.run(write_free.max(room), length);
                            write_free
                        }
                        _ => {
                            load_free = to_device.run(load_free.max(room), length);
                            load_free
                        }
                    };
                    loaded.insert(*storage, end);
                }
                Step::WriteBack { storage, bytes, after } => {
                    write_free = write_free.max(ended(&op_end, *after)).max(host) + *bytes as f64 / bandwidth;
                    written.insert(*storage, write_free);
                }
                Step::Op { storages, .. } => {
                    let ready = storages.iter().filter_map(|s| loaded.get(s)).fold(compute_free.max(host), |a, &b| a.max(b));
                    compute_free = ready + costs[op_end.len() - first_op as usize];
                    op_end.push(compute_free);
                }
            }
            // No copy from here on is ready before either stream is free.
            to_device.forget_before(load_free.min(write_free));
        }
    }
    let written_bytes = pass.written_bytes();
    let copy_busy = (pass.loaded_bytes() + written_bytes) as f64 / bandwidth;
    let compute_busy: f64 = costs.iter().sum();
    let remade: f64 = pass.ops().zip(&costs).filter(|(s, _)| matches!(s, Step::Op { work: Work::Remake, .. })).map(|(_, c)| c).sum();
    let makespan = compute_free.max(load_free).max(write_free) / REPEATS as f64;
    let bound = (pass.loaded_bytes().max(written_bytes) as f64 / bandwidth).max(compute_busy);
    Replay { makespan, bound, copy_busy, compute_busy, unmanaged: compute_busy - remade }
}

/// A copy engine: the intervals it is busy, in order.
#[derive(Default)]
struct Engine {
    busy: Vec<(f64, f64)>,
}

impl Engine {
    /// Runs a copy of `length` seconds from the earliest time at or after `ready` when the engine
    /// is free that long; returns when it ends.
    fn run(&mut self, ready: f64, length: f64) -> f64 {
        let mut start = ready;
        let mut i = self.busy.partition_point(|&(_, end)| end <= ready);
        while i < self.busy.len() && self.busy[i].0 < start + length {
            start = start.max(self.busy[i].1);
            i += 1;
        }
        self.busy.insert(i, (start, start + length));
        start + length
    }

    /// Forgets the intervals that end before `time`, which no copy still to come can use.
    fn forget_before(&mut self, time: f64) {
        let gone = self.busy.partition_point(|&(_, end)| end < time);
        self.busy.drain(..gone);
    }
}


impl Rates {
    /// `replay` of `pass` at these rates.
    pub fn replay(self, pass: &Pass, elem: usize) -> Replay {
        replay(pass, self.link, self.kernels(elem))
    }
}

//! A model of one recorded pass on a GPU, to optimise Flow before one is at hand. The manager
//! logs what it did in a pass (`Log`): each op with the storages it read, and each copy it
//! started with what the copy had to wait for. `replay` runs that log on two engines, a copy
//! engine at a given bandwidth and a compute engine at given per-op times, with the dependencies
//! the real device has:
//! - an op starts when the previous op has ended and the loads of its inputs have ended (it waits
//!   only on the copies it needs);
//! - a load starts when the copy engine is free and, if room was made for it by evicting, when
//!   the last op that used the evicted memory has ended (the budget holds on the device too);
//! - a write-back starts after every op issued before it has ended (the side stream waits for the
//!   compute stream), and the copies after it wait for it (one side stream).
//!
//! The pass is replayed several times back to back, and the steady-state time per pass is
//! compared with the bound no schedule can beat: max(bytes loaded / bandwidth, compute time).

use super::trace::TraceKey;
use std::collections::HashMap;

/// One step of a pass, in the order the host issued it.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// An op: its name, the storages it read and their bytes, and its result's bytes (0 for
    /// none, or a view).
    Op { name: &'static str, storages: Vec<u64>, input_bytes: Vec<u64>, output_bytes: u64 },
    /// A load of `bytes` into `storage`; `after`: the last op that used the memory evicted to
    /// make room for it, if any.
    Load { storage: u64, bytes: u64, after: Option<usize> },
    /// A write-back of `bytes`, issued after op `after` (the side stream waits for it).
    WriteBack { bytes: u64, after: Option<usize> },
}

/// The steps of one pass (from one iteration mark to the next).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pass {
    pub steps: Vec<Step>,
}

impl Pass {
    pub fn ops(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().filter(|s| matches!(s, Step::Op { .. }))
    }

    pub fn loaded_bytes(&self) -> u64 {
        self.steps.iter().map(|s| if let Step::Load { bytes, .. } = s { *bytes } else { 0 }).sum()
    }
}

/// What the manager logs while a schedule log is on.
#[derive(Default)]
pub(crate) struct Log {
    current: Pass,
    last: Option<Pass>,
    /// Ops logged in the current pass.
    ops: usize,
    /// The last op (index in the current pass) that used each storage's device memory.
    last_use: HashMap<u64, usize>,
    /// The latest last use among storages evicted since the previous load.
    freed_after: Option<usize>,
    /// The storages read by the op being run.
    reading: Vec<u64>,
}

impl Log {
    pub(crate) fn uses(&mut self, storage: u64) {
        self.last_use.insert(storage, self.ops);
        self.reading.push(storage);
    }

    pub(crate) fn made(&mut self, storage: u64) {
        self.last_use.insert(storage, self.ops.saturating_sub(1));
    }

    pub(crate) fn evict(&mut self, storage: u64) {
        if let Some(&used) = self.last_use.get(&storage) {
            self.freed_after = Some(self.freed_after.map_or(used, |f| f.max(used)));
        }
    }

    pub(crate) fn load(&mut self, storage: u64, bytes: u64) {
        let after = self.freed_after.take();
        self.current.steps.push(Step::Load { storage, bytes, after });
    }

    pub(crate) fn write_back(&mut self, bytes: u64) {
        self.current.steps.push(Step::WriteBack { bytes, after: self.ops.checked_sub(1) });
    }

    pub(crate) fn op(&mut self, name: &'static str, inputs: &[(TraceKey, u64)], output: Option<u64>) {
        let storages = std::mem::take(&mut self.reading);
        let input_bytes = inputs.iter().map(|i| i.1).collect();
        self.current.steps.push(Step::Op { name, storages, input_bytes, output_bytes: output.unwrap_or(0) });
        self.ops += 1;
    }

    pub(crate) fn mark(&mut self) {
        self.last = Some(std::mem::take(&mut self.current));
        self.ops = 0;
        self.last_use.clear();
        self.freed_after = None;
    }

    pub(crate) fn last_pass(&self) -> Option<&Pass> {
        self.last.as_ref()
    }
}

/// The replay of one pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replay {
    /// Seconds per pass in steady state: the pass replayed several times back to back, the mean
    /// time between the ends of the passes after the first (copies a pass starts for the next
    /// one then overlap the next one, as on the device).
    pub makespan: f64,
    /// max(loaded bytes / bandwidth, compute time) of one pass: no schedule of these loads and
    /// ops is faster.
    pub bound: f64,
    pub copy_busy: f64,
    pub compute_busy: f64,
}

impl Replay {
    /// bound / makespan: 1.0 is a perfect overlap.
    pub fn efficiency(&self) -> f64 {
        if self.makespan > 0.0 { self.bound / self.makespan } else { 1.0 }
    }
}

/// How many times a pass is replayed back to back; the first is left out of the steady state.
const REPEATS: usize = 6;

/// Replays `pass` with a copy engine of `bandwidth` bytes per second and `compute(op)` seconds
/// per op (see the module's rules).
pub fn replay(pass: &Pass, bandwidth: f64, compute: impl Fn(&Step) -> f64) -> Replay {
    let (mut copy_free, mut compute_free) = (0.0f64, 0.0f64);
    let mut op_end: Vec<f64> = vec![];
    let mut loaded: HashMap<u64, f64> = HashMap::new();
    let mut pass_end = [0.0; REPEATS];
    for end in &mut pass_end {
        let first_op = op_end.len();
        let ended = |ends: &[f64], after: &Option<usize>| after.and_then(|a| ends.get(first_op + a).copied()).unwrap_or(0.0);
        for step in &pass.steps {
            match step {
                Step::Load { storage, bytes, after } => {
                    copy_free = copy_free.max(ended(&op_end, after)) + *bytes as f64 / bandwidth;
                    loaded.insert(*storage, copy_free);
                }
                Step::WriteBack { bytes, after } => copy_free = copy_free.max(ended(&op_end, after)) + *bytes as f64 / bandwidth,
                Step::Op { storages, .. } => {
                    let ready = storages.iter().filter_map(|s| loaded.get(s)).fold(compute_free, |a, &b| a.max(b));
                    compute_free = ready + compute(step);
                    op_end.push(compute_free);
                }
            }
        }
        *end = compute_free;
    }
    let copy_busy = pass.steps.iter().map(|s| if let Step::Load { bytes, .. } | Step::WriteBack { bytes, .. } = s { *bytes as f64 / bandwidth } else { 0.0 }).sum();
    let compute_busy: f64 = pass.ops().map(&compute).sum();
    let makespan = (pass_end[REPEATS - 1] - pass_end[1]) / (REPEATS - 2) as f64;
    Replay { makespan, bound: (pass.loaded_bytes() as f64 / bandwidth).max(compute_busy), copy_busy, compute_busy }
}

/// A roofline cost for `replay`: a matrix product (linear, matmul, bmm) takes its FLOPs at
/// `flops` per second, anything else reads its inputs and writes its output at
/// `memory_bandwidth` bytes per second. For x [b, in], w [out, in] and y [b, out] of
/// `elem`-byte elements, 2 b in out = 2 sqrt(bytes(x) bytes(w) bytes(y) / elem^3).
pub fn roofline(flops: f64, memory_bandwidth: f64, elem: usize) -> impl Fn(&Step) -> f64 {
    let elem = elem as f64;
    move |op| {
        let Step::Op { name, input_bytes, output_bytes, .. } = op else { return 0.0 };
        match (*name, &input_bytes[..]) {
            ("linear" | "matmul" | "bmm", [x, w, ..]) => 2.0 * (*x as f64 * *w as f64 * *output_bytes as f64 / elem.powi(3)).sqrt() / flops,
            _ => (input_bytes.iter().sum::<u64>() + output_bytes) as f64 / memory_bandwidth,
        }
    }
}

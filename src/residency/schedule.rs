//! A model of one recorded pass on a GPU, to optimise Flow before one is at hand. The manager
//! logs what it did in a pass (`Log`): each op with the storages it read, and each copy it
//! started with what the copy had to wait for. `replay` runs that log on three engines, a copy
//! engine for each direction at a given bandwidth (the link is full duplex; src/native/
//! streams.cpp has a side stream for each) and a compute engine at given per-op times, with the
//! dependencies the real device has:
//! - an op starts when the previous op has ended and the loads of its inputs have ended (it waits
//!   only on the copies it needs);
//! - a load starts when the previous load has ended and, if room was made for it by evicting,
//!   when the last op that used the evicted memory has ended (the budget holds on the device too);
//!   a load of a home whose write-back has not ended by then is queued behind the write-backs
//!   on their stream instead, leaving the loads after it free to go;
//! - every load, on whichever stream, runs on the one host-to-device copy engine: at the earliest
//!   time it is ready and the engine is free for its length (a copy another stream issued later
//!   may run in a gap before it), so that the loads of a pass take at least their bytes over the
//!   bandwidth, and no replay beats the bound;
//! - a write-back starts when the previous write-back has ended and after every op issued before
//!   it has ended (its stream waits for the compute stream);
//! - nothing starts before the host issues it: the host issues the steps in order without delay,
//!   except where it read a result (`Step::HostWait`), after which it issues nothing until the op
//!   that made the result has ended. A pass that reads its output (a loss, a checksum) before the
//!   next begins thus exposes the next pass's first loads unless they were issued ahead.
//!
//! A training step's backward kernels are autograd's, not the manager's: what the log sees of
//! them is each saved tensor unpacked, and which op saved it. An unpack stands for the backward
//! of the ops from the one that saved it to the previous unpack's (`Work::Backward`), costed at
//! `BACKWARD_COST` times their forward cost. Results made again (`Work::Remake`) are costed as
//! the op they repeat.
//!
//! The pass is replayed several times back to back, and the time per pass, until every op and
//! copy has ended, is compared with the bound no schedule can beat, max(bytes loaded /
//! bandwidth, bytes written back / bandwidth, compute time), and with the pass as it would run
//! with nothing moved or remade (`Replay::unmanaged`). The replay never beats that bound
//! (tests/residency.rs, `the_schedule_model_never_beats_its_bound`, over random logs).

use super::saved::SAVE;
use super::trace::TraceKey;
use std::collections::HashMap;

/// One step of a pass, in the order the host issued it.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// An op: its name, the storages it read, their bytes and the shapes it read them as (in the
    /// order it read them), its result's bytes (0 for none, or a view), and what work it stands
    /// for.
    Op { name: &'static str, storages: Vec<u64>, input_bytes: Vec<u64>, shapes: Vec<Vec<i64>>, output_bytes: u64, work: Work },
    /// A load of `bytes` into `storage`; `after`: the last op that used the memory evicted to
    /// make room for it, if any (an op's index among this pass's ops; negative for the pass
    /// before: -1 is its last op).
    Load { storage: u64, bytes: u64, after: Option<isize> },
    /// A write-back of `bytes` of `storage`, issued after op `after` (its stream waits for it).
    WriteBack { storage: u64, bytes: u64, after: Option<isize> },
    /// The host read a result of op `after` (indexed as a load's `after`): it issued nothing
    /// more until that op had ended.
    HostWait { after: isize },
}

/// What an op step stands for on the compute engine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Work {
    /// An op the program ran.
    Program,
    /// A dropped result made again.
    Remake,
    /// A saved tensor unpacked for backward; `saved_at`: the index (among this pass's op steps)
    /// of the op that was running when autograd saved it, if that was in this pass.
    Backward { saved_at: Option<usize> },
}

/// A backward op's cost against its forward op's: a matrix product's backward is two products
/// of its size (the inputs' gradients and the weight's), an elementwise op's reads and writes
/// about twice the bytes.
/// cbindgen:ignore
pub const BACKWARD_COST: f64 = 2.0;

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
    /// The last op that used each storage's device memory, as a position (ops logged before
    /// it, over all passes); those of the passes before the previous one are forgotten.
    last_use: HashMap<u64, usize>,
    /// The latest last use (a position) among storages evicted since the previous load.
    freed_after: Option<usize>,
    /// The storages read by the op being run, and the shapes it read them as.
    reading: Vec<(u64, Vec<i64>)>,
    /// Ops logged before the current pass.
    passed: usize,
}

impl Log {
    pub(crate) fn uses(&mut self, storage: u64, shape: Vec<i64>) {
        self.last_use.insert(storage, self.position());
        self.reading.push((storage, shape));
    }

    pub(crate) fn made(&mut self, storage: u64) {
        self.last_use.insert(storage, self.position().saturating_sub(1));
    }

    /// A position as an index among the current pass's ops (negative: a pass before).
    fn in_pass(&self, position: usize) -> isize {
        position as isize - self.passed as isize
    }

    /// The host read `storage`'s data: it waits for the last op that used it.
    pub(crate) fn host_read(&mut self, storage: u64) {
        if let Some(&used) = self.last_use.get(&storage) {
            let after = self.in_pass(used);
            self.current.steps.push(Step::HostWait { after });
        }
    }

    pub(crate) fn evict(&mut self, storage: u64) {
        if let Some(&used) = self.last_use.get(&storage) {
            self.freed_after = Some(self.freed_after.map_or(used, |f| f.max(used)));
        }
    }

    pub(crate) fn load(&mut self, storage: u64, bytes: u64) {
        let after = self.freed_after.take().map(|used| self.in_pass(used));
        self.current.steps.push(Step::Load { storage, bytes, after });
    }

    pub(crate) fn write_back(&mut self, storage: u64, bytes: u64) {
        let after = self.position().checked_sub(1).map(|last| self.in_pass(last));
        self.current.steps.push(Step::WriteBack { storage, bytes, after });
    }

    pub(crate) fn op(&mut self, name: &'static str, inputs: &[(TraceKey, u64)], output: Option<u64>) {
        // What was read so far belongs to the op that saves, still running.
        let reading = if name == SAVE { Vec::new() } else { std::mem::take(&mut self.reading) };
        let (storages, shapes) = reading.into_iter().unzip();
        let input_bytes = inputs.iter().map(|i| i.1).collect();
        self.push_op(Step::Op { name, storages, input_bytes, shapes, output_bytes: output.unwrap_or(0), work: Work::Program });
    }

    fn push_op(&mut self, op: Step) {
        self.current.steps.push(op);
        self.ops += 1;
    }

    /// Where the log stands, for `unpacked` to tell which op saved a tensor: ops logged so far.
    pub(crate) fn position(&self) -> usize {
        self.passed + self.ops
    }

    /// The op just logged was an unpack for backward of a tensor saved at `position`.
    pub(crate) fn unpacked(&mut self, position: Option<usize>) {
        let saved_at = position.and_then(|p| p.checked_sub(self.passed));
        if let Some(Step::Op { work, .. }) = self.current.steps.last_mut() {
            *work = Work::Backward { saved_at };
        }
    }

    /// Before a dropped result is made again: the mark `remade` takes.
    pub(crate) fn remake_begin(&self) -> usize {
        self.reading.len()
    }

    /// A result made again by `name` from `input_bytes`, reading the storages used since `begin`.
    pub(crate) fn remade(&mut self, begin: usize, name: &'static str, input_bytes: Vec<u64>, output_bytes: u64) {
        let (storages, shapes) = self.reading.split_off(begin.min(self.reading.len())).into_iter().unzip();
        self.push_op(Step::Op { name, storages, input_bytes, shapes, output_bytes, work: Work::Remake });
    }

    /// Ends a pass. Last uses carry over: memory a pass evicts may last have been used in the
    /// pass before, and its load must wait for that op as well. Older ones are forgotten (a
    /// dependency left out only makes the replay faster, so it stays a lower bound).
    pub(crate) fn mark(&mut self) {
        self.last = Some(std::mem::take(&mut self.current));
        let previous = self.passed;
        self.passed += self.ops;
        self.ops = 0;
        self.last_use.retain(|_, used| *used >= previous);
        self.freed_after = self.freed_after.filter(|&f| f >= previous);
    }

    pub(crate) fn last_pass(&self) -> Option<&Pass> {
        self.last.as_ref()
    }
}

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
    let written_bytes: u64 = pass.steps.iter().map(|s| if let Step::WriteBack { bytes, .. } = s { *bytes } else { 0 }).sum();
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

/// Each op step's time: `compute` for an op the program ran or one made again; for an unpack,
/// `BACKWARD_COST` times the forward cost of the ops the program ran from the one that saved
/// the tensor up to the previous unpack's (0 if the previous unpack's reaches further back). An
/// unpack of a tensor saved after the previous one's range began starts a new backward pass.
fn op_costs(pass: &Pass, compute: &impl Fn(&Step) -> f64) -> Vec<f64> {
    let ops: Vec<&Step> = pass.ops().collect();
    let forward: Vec<f64> = ops.iter().map(|s| if matches!(s, Step::Op { work: Work::Program, .. }) { compute(s) } else { 0.0 }).collect();
    let mut costs = Vec::with_capacity(ops.len());
    // The backward pass under way: the op step where it began, and the lowest op it has reached.
    let mut backward: Option<(usize, usize)> = None;
    for (i, op) in ops.iter().enumerate() {
        costs.push(match op {
            Step::Op { work: Work::Backward { saved_at: Some(at) }, .. } => {
                let (began, reached) = match backward {
                    Some((began, reached)) if *at < began => (began, reached),
                    _ => (i, i),
                };
                let from = (*at).min(reached);
                backward = Some((began, from));
                BACKWARD_COST * forward[from..reached].iter().sum::<f64>()
            }
            Step::Op { work: Work::Backward { saved_at: None }, .. } => 0.0,
            op => compute(op),
        });
    }
    costs
}

/// A device's rates for the model: its link, bytes/s each way; its matrix products, FLOP/s; its
/// memory bandwidth for every other op, bytes/s; and the least time of a kernel (a launch), s.
/// cbindgen:ignore
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub link: f64,
    pub flops: f64,
    pub memory_bandwidth: f64,
    pub launch: f64,
}

/// An H100's: PCIe 5 from page-locked memory, f32 products without TF32, HBM3 (the measured
/// figures and their sources: docs/performance.md, "The hardware the model and the docs
/// assume"). The recomputation cost rule prices with these on every device.
/// cbindgen:ignore
pub const H100: Rates = Rates { link: 53.6e9, flops: 50e12, memory_bandwidth: 3e12, launch: 5e-6 };

impl Rates {
    /// `roofline` at these rates for `elem`-byte elements, each kernel taking at least a launch
    /// (a step that runs none, a saved tensor's, takes nothing).
    pub fn kernels(self, elem: usize) -> impl Fn(&Step) -> f64 {
        let roofline = roofline(self.flops, self.memory_bandwidth, elem);
        move |step| match roofline(step) {
            0.0 => 0.0,
            t => t.max(self.launch),
        }
    }

    /// `replay` of `pass` at these rates.
    pub fn replay(self, pass: &Pass, elem: usize) -> Replay {
        replay(pass, self.link, self.kernels(elem))
    }
}

/// A roofline cost for `replay`: a matrix product (linear, matmul, bmm) takes its FLOPs at
/// `flops` per second, anything else reads its inputs and writes its output at
/// `memory_bandwidth` bytes per second. A product's FLOPs are 2 k per element of its result of
/// `elem`-byte elements, k being the last dimension of its first input as the op read it.
pub fn roofline(flops: f64, memory_bandwidth: f64, elem: usize) -> impl Fn(&Step) -> f64 {
    move |op| {
        let Step::Op { name, input_bytes, shapes, output_bytes, .. } = op else { return 0.0 };
        let k = shapes.first().and_then(|s| s.last().copied());
        op_seconds(name, k, input_bytes.iter().sum(), *output_bytes, flops, memory_bandwidth, elem)
    }
}

/// One op's time by `roofline`'s rule: `k`, the last dimension of its first input as it read
/// it; `input_bytes`, what it read.
pub(crate) fn op_seconds(name: &str, k: Option<i64>, input_bytes: u64, output_bytes: u64, flops: f64, memory_bandwidth: f64, elem: usize) -> f64 {
    match (name, k) {
        (SAVE, _) => 0.0,
        ("linear" | "matmul" | "bmm", Some(k)) => 2.0 * k as f64 * (output_bytes / elem as u64) as f64 / flops,
        _ => (input_bytes + output_bytes) as f64 / memory_bandwidth,
    }
}

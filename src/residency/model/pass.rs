//! The log of one pass the manager keeps for the schedule model: each op with the storages it
//! read, each copy it started with what the copy had to wait for, and where the host waited.

use crate::residency::policy::flow::trace::TraceKey;
use std::collections::HashMap;

/// The op the trace and the log record for a saved tensor that becomes a storage of its own. It
/// runs inside the op that saves it, and no kernel of its own.
pub(crate) const SAVE: &str = "save";

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

    pub fn written_bytes(&self) -> u64 {
        self.steps.iter().map(|s| if let Step::WriteBack { bytes, .. } = s { *bytes } else { 0 }).sum()
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


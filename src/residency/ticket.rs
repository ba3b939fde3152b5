//! One op under the manager: `Ticket` acquires each input's device copy (held there until the
//! op ends, on every exit path), places the result, records the op in the trace, and waits,
//! after the manager's lock is released, for what the op owes before it returns.
//!
//! Autograd runs through managed tensors. An op reads device copies, and a result is registered
//! as a host tensor standing for its device copy; `native::connect_grad` joins each to the tensor
//! it stands for, so the graph runs from every result back to the leaves, and a leaf's gradient
//! accumulates on the leaf. An optimizer step reads each parameter's gradient as memory written
//! outside the library's ops (backward accumulates into it): loaded for the step, never cached.

use super::trace::TraceKey;
use super::{lock, with, wait_all};
use crate::error::{Error, Result};
use crate::registry::Entry;
use std::sync::Arc;

/// Ops that act on the tensor's own autograd state: never moved.
const ON_THE_TENSOR: [&str; 4] = ["requires_grad", "requires_grad_", "grad", "zero_grad"];
/// Ops that read each parameter's gradient.
const OPTIMIZER_STEPS: [&str; 2] = ["optim_sgd_step", "optim_adam_step"];

pub(crate) struct Ticket {
    op: &'static str,
    /// Why the op may not run (the manager was called from its own event callback).
    refused: Option<Error>,
    /// Storages acquired, one per input (released when the op ends).
    acquired: Vec<u64>,
    /// What the trace records: each storage read, once.
    record: Vec<(TraceKey, u64)>,
    anchor: u64,
    anchored: bool,
    moves: bool,
    /// Tensors the op writes through their device copies: when the op records a graph, each
    /// tensor's gradient function follows its copy's.
    written: Vec<(tch::Tensor, tch::Tensor)>,
    /// Gradients an optimizer step loaded (alive until the step ends).
    grads: Vec<Arc<Entry>>,
}

impl Ticket {
    pub(crate) fn begin(op: &'static str) -> Option<Ticket> {
        let ticket = |refused, moves| Ticket {
            op,
            refused,
            acquired: Vec::new(),
            record: Vec::new(),
            anchor: 0xcbf2_9ce4_8422_2325,
            anchored: false,
            moves,
            written: Vec::new(),
            grads: Vec::new(),
        };
        match lock() {
            Err(e) => Some(ticket(Some(e), false)),
            Ok(mut held) => {
                let m = held.as_mut()?;
                m.op_begin(op);
                Some(ticket(None, m.moves()))
            }
        }
    }

    fn check(&self) -> Result<()> {
        self.refused.clone().map_or(Ok(()), Err)
    }

    /// The device copy of an input (the tensor itself when nothing moves).
    pub(crate) fn acquire(&mut self, entry: &Entry, write: bool) -> Result<tch::Tensor> {
        self.check()?;
        if ON_THE_TENSOR.contains(&self.op) {
            return Ok(entry.shallow_clone());
        }
        let step = OPTIMIZER_STEPS.contains(&self.op);
        let recording = !step && crate::native::grad_enabled();
        if write && recording && entry.requires_grad() && entry.is_leaf() {
            // What libtorch says without a manager, where a device copy would not be a leaf.
            return Err(Error::InvalidArg(format!("`{}`: a leaf Variable that requires grad is being used in an in-place operation.", self.op)));
        }
        if !self.moves {
            return Ok(entry.shallow_clone());
        }
        let view = self.acquire_storage(entry, write)?;
        if step {
            self.load_grad(entry, &view)?;
        } else if entry.requires_grad() && (recording || self.op == "backward") {
            crate::native::connect_grad(&view, entry)?;
        }
        if write && recording {
            self.written.push((entry.shallow_clone(), view.shallow_clone()));
        }
        Ok(view)
    }

    fn acquire_storage(&mut self, entry: &Entry, write: bool) -> Result<tch::Tensor> {
        let a = with(|m| m.acquire(entry, write, self.op))?;
        if let (TraceKey::Persistent(id), true) = (a.key, a.used_before) {
            // FNV-1a over the already-used persistent inputs: the op's anchor signature.
            self.anchor = (self.anchor ^ id).wrapping_mul(0x100_0000_01b3);
            self.anchored = true;
        }
        self.acquired.push(a.storage);
        if !self.record.iter().any(|r| r.0 == a.key) {
            self.record.push((a.key, a.bytes));
        }
        Ok(a.view)
    }

    /// Gives a parameter's device copy its gradient's device copy, for an optimizer step.
    fn load_grad(&mut self, param: &Entry, view: &tch::Tensor) -> Result<()> {
        let grad = param.f_grad()?;
        if !grad.defined() {
            return Ok(());
        }
        crate::native::mark_external(&grad)?;
        let grad = Arc::new(Entry::new(grad));
        let device = self.acquire_storage(&grad, false)?;
        crate::native::set_grad(view, &device)?;
        self.grads.push(grad);
        Ok(())
    }

    /// After an op that recorded a graph: each tensor written through its device copy takes
    /// the copy's new gradient function.
    fn follow_written(&mut self) -> Result<()> {
        for (tensor, view) in std::mem::take(&mut self.written) {
            if view.requires_grad() {
                crate::native::connect_grad(&tensor, &view)?;
            }
        }
        Ok(())
    }

    /// Places the op's result: on the device with the policy's rules when the op ran there,
    /// else (a creation op) in host memory as an ordinary entry. On an error (out of memory,
    /// budget) the ticket stays open, so the op can be retried.
    pub(crate) fn finish(&mut self, result: tch::Tensor) -> Result<Arc<Entry>> {
        self.check()?;
        if !self.moves || self.acquired.is_empty() {
            self.end()?;
            return Ok(Arc::new(Entry::new(result)));
        }
        let graph = result.requires_grad().then(|| result.shallow_clone());
        let anchor = self.anchored.then_some(self.anchor);
        let acquired = std::mem::take(&mut self.acquired);
        let placed = with(|m| {
            let entry = m.place_result(result, self.op, &self.record, anchor)?;
            acquired.iter().for_each(|&id| m.release(id));
            Ok((entry, m.op_finished(self.op)))
        });
        let (entry, owed) = match placed {
            Ok(done) => done,
            Err(e) => {
                self.acquired = acquired;
                return Err(e);
            }
        };
        wait_all(owed)?;
        if let Some(result) = graph {
            crate::native::connect_grad(&entry, &result)?;
        }
        self.follow_written()?;
        Ok(Arc::new(entry))
    }

    /// Ends an op that made no tensor.
    pub(crate) fn end(&mut self) -> Result<()> {
        self.check()?;
        let anchor = self.anchored.then_some(self.anchor);
        let acquired = std::mem::take(&mut self.acquired);
        let owed = with(|m| {
            m.end_op(self.op, &self.record, None, anchor);
            acquired.iter().for_each(|&id| m.release(id));
            Ok(m.op_finished(self.op))
        })?;
        wait_all(owed)?;
        self.follow_written()
    }

    /// Out-of-memory recovery: evicts every device copy no running op uses; returns how many.
    pub(crate) fn evict_unused(&self) -> usize {
        with(|m| {
            m.stats.oom_retries += 1;
            Ok(m.evict_unused())
        })
        .unwrap_or(0)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let acquired = std::mem::take(&mut self.acquired);
        if acquired.is_empty() {
            return;
        }
        let _ = with(|m| {
            acquired.iter().for_each(|&id| m.release(id));
            m.take_owed();
            Ok(())
        });
    }
}

//! One op under the manager: `Ticket` acquires each input's device copy (held there until the
//! op ends, on every exit path), places the result, records the op in the trace, and waits,
//! after the manager's lock is released, for what the op owes before it returns.
//!
//! Autograd is refused consistently: at the first op that would record a graph (an input that
//! requires grad while grad mode is on, or a backward or optimizer step over such an input),
//! under every policy. The read-only autograd queries and `requires_grad_` act on the tensor
//! itself and always work.

use super::trace::TraceKey;
use super::{lock, with, wait_all};
use crate::error::{Error, Result};
use crate::registry::Entry;
use std::sync::Arc;

/// Ops that act on the tensor's own metadata: never moved, never refused.
const ON_THE_TENSOR: [&str; 4] = ["requires_grad", "requires_grad_", "grad", "zero_grad"];
/// Ops that use the autograd graph whatever the grad mode.
const GRAPH_OPS: [&str; 3] = ["backward", "optim_sgd_step", "optim_adam_step"];

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
}

impl Ticket {
    pub(crate) fn begin(op: &'static str) -> Option<Ticket> {
        let ticket = |refused, moves| Ticket { op, refused, acquired: Vec::new(), record: Vec::new(), anchor: 0xcbf2_9ce4_8422_2325, anchored: false, moves };
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
        if entry.requires_grad() && (GRAPH_OPS.contains(&self.op) || crate::native::grad_enabled()) {
            return Err(Error::InvalidArg(format!(
                "`{}`: autograd through the residency manager is not supported yet; run the op under no_grad (inference) or without a manager",
                self.op
            )));
        }
        if !self.moves {
            return Ok(entry.shallow_clone());
        }
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

    /// Places the op's result: on the device with the policy's rules when the op ran there,
    /// else (a creation op) in host memory as an ordinary entry. On an error (out of memory,
    /// budget) the ticket stays open, so the op can be retried.
    pub(crate) fn finish(&mut self, result: tch::Tensor) -> Result<Arc<Entry>> {
        self.check()?;
        if !self.moves || self.acquired.is_empty() {
            self.end()?;
            return Ok(Arc::new(Entry::new(result)));
        }
        let anchor = self.anchored.then_some(self.anchor);
        let acquired = std::mem::take(&mut self.acquired);
        let placed = with(|m| {
            let entry = m.place_result(result, self.op, &acquired, &self.record, anchor)?;
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
        wait_all(owed)
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

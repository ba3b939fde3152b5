//! One op under the manager: `Ticket` acquires each input's device copy (held there until the
//! op ends, on every exit path), places the result and records the op in the trace. The op
//! ends once its attempt has returned and its views of the copies are gone (`room::finish_op`),
//! and waits then, outside the manager's lock, for what it owes before it returns.
//!
//! Autograd runs through managed tensors. An op reads device copies, and a result is registered
//! as a host tensor standing for its device copy; `crate::residency::autograd::connect_grad` joins each to the tensor
//! it stands for, so the graph runs from every result back to the leaves, where the manager keeps
//! the gradients (`grads`). An optimizer step and `zero_grad` load a parameter's gradient like any
//! input and hand it to the op as the gradient of the parameter's device copy.

use crate::residency::device::memory;
use crate::residency::training::recipe::Recipe;
use crate::residency::policy::flow::trace::TraceKey;
use crate::residency::{lock, with};
use crate::error::{Error, Result};
use crate::registry::Entry;
use crate::residency::core::room::Held;
use crate::residency::core::{cache_lines, storage_table};
use smallvec::SmallVec;
use std::sync::Arc;

/// Ops that act on the tensor's own autograd state: never moved.
const ON_THE_TENSOR: [&str; 4] = ["requires_grad", "requires_grad_", "grad", "clear_grad"];
/// Ops on a parameter's gradient: an optimizer step reads it, `zero_grad` writes it.
const GRAD_OPS: [&str; 3] = ["optim_sgd_step", "optim_adam_step", "zero_grad"];

pub(crate) struct Ticket {
    op: &'static str,
    /// Why the op may not run (the manager was called from its own event callback).
    refused: Option<Error>,
    /// Storages acquired, one per input (released when the op ends).
    acquired: Held,
    /// What the trace records: each storage read, once.
    record: SmallVec<[(TraceKey, u64); 4]>,
    anchor: u64,
    anchored: bool,
    moves: bool,
    /// Results may keep recipes (see `recompute`).
    recomputes: bool,
    /// The kernel's memory is the simulated device's, counted by its allocator.
    simulated: bool,
    /// What the kernel allocated at its peak, its result and scratch (on the simulated device).
    kernel_bytes: std::cell::Cell<u64>,
    /// The device's kernels allocate without asking for room, so the room for the outputs is
    /// reserved before the kernel runs (`reserve`), and how much the front door reserved.
    reserves: bool,
    reserved: Option<u64>,
    /// Tensors the op writes through their device copies: when the op records a graph, each
    /// tensor's gradient function follows its copy's.
    written: Vec<(tch::Tensor, tch::Tensor)>,
    /// Gradients an optimizer step or `zero_grad` loaded (alive until the op ends).
    grads: Vec<Arc<Entry>>,
    /// Each input's view, as the op got it. An input given twice (the same handle, or two that
    /// are one tensor) gets the same view again, and a result that is one of the views is that
    /// input again (`contiguous` of a contiguous tensor), so that libtorch's identity and overlap
    /// checks see what they would without a manager.
    views: SmallVec<[View; 4]>,
}

/// An input of an op through `Ticket::acquire`, and the view of its device copy the op got.
struct View {
    /// The input's TensorImpl, and the view's.
    input: usize,
    view: usize,
    placed: Arc<Entry>,
    original: Arc<Entry>,
}

impl Ticket {
    pub(crate) fn begin(op: &'static str) -> Option<Ticket> {
        let ticket = |refused, moves, recomputes, simulated, reserves| Ticket {
            op,
            refused,
            acquired: Held::new(),
            record: SmallVec::new(),
            anchor: 0xcbf2_9ce4_8422_2325,
            anchored: false,
            moves,
            recomputes,
            simulated,
            kernel_bytes: std::cell::Cell::new(0),
            reserves,
            reserved: None,
            written: Vec::new(),
            grads: Vec::new(),
            views: SmallVec::new(),
        };
        match lock() {
            Err(e) => Some(ticket(Some(e), false, false, false, false)),
            Ok(mut held) => {
                let m = held.as_mut()?;
                m.op_begin(op);
                let recomputes = m.moves() && m.policy.bounded() && m.cfg.recompute != crate::residency::Recompute::Off;
                let simulated = m.moves() && m.cfg.device == crate::residency::Device::Simulated;
                Some(ticket(None, m.moves(), recomputes, simulated, m.reserves()))
            }
        }
    }

    /// The op's name, as it began.
    pub(crate) fn op(&self) -> &'static str {
        self.op
    }

    /// Whether the op's result may keep a recipe (a manager that moves data recomputes).
    pub(crate) fn recomputes(&self) -> bool {
        self.recomputes
    }

    /// Whether the front door should `reserve` room for the op's outputs before its kernel.
    pub(crate) fn reserves(&self) -> bool {
        self.reserves && !self.acquired.is_empty()
    }

    /// Makes room for `bytes` of outputs the kernel is about to make, where the device's kernels
    /// allocate without asking (see `core::outputs`); held until the op places them or ends. Once
    /// per op, after its inputs are acquired. Fails as a kernel refused room does.
    pub(crate) fn reserve(&mut self, bytes: u64) -> Result<()> {
        self.check()?;
        if !self.reserves() {
            return Ok(());
        }
        if bytes > 0 {
            with(|m| m.reserve(bytes, self.op))?;
        }
        self.reserved = Some(bytes);
        Ok(())
    }

    /// Runs the op's kernel. On the simulated device each allocation asks for room first, so
    /// that the op's outputs and scratch fit the budget before they exist; an op refused room
    /// fails with why (another op holds it: the op runs again). `backward` runs the whole graph
    /// and cannot run twice: where other ops hold the room it needs it waits for it in place
    /// (`memory::room_for`), and the gradients its nodes pass on are in flight until they
    /// are freed or become a leaf's gradient.
    pub(crate) fn kernel<R>(&self, body: impl FnOnce() -> Result<R>) -> Result<R> {
        if !self.simulated || self.acquired.is_empty() {
            return body(); // a creation op's result is host memory (see `finish`)
        }
        let result = {
            let _kernel = memory::Scope::kernel(self.op);
            memory::kernel_peak();
            let result = body();
            self.kernel_bytes.set(memory::kernel_peak());
            if self.reserves() {
                // beyond the room reserved for its outputs; all of it where it reserved none
                memory::scratch(self.kernel_bytes.get().saturating_sub(self.reserved.unwrap_or(0)));
            }
            result
        };
        match memory::refusal() {
            Some(why) => Err(why),
            None => result,
        }
    }

    fn check(&self) -> Result<()> {
        self.refused.clone().map_or(Ok(()), Err)
    }

    /// Fetches into the cache what acquiring `entries` reads, a level at a time, so that the
    /// misses of all inputs overlap (see `cache_lines`): libtorch's tensor and the storage
    /// record, then the TensorImpl, then its version counter and the device copy's StorageImpl
    /// (whose address the record holds: read under the manager's lock). A hint, which changes
    /// nothing the op sees.
    pub(crate) fn fetch<'a>(&self, entries: impl Iterator<Item = &'a Entry> + Clone) {
        if !self.moves || self.refused.is_some() {
            return;
        }
        for e in entries.clone() {
            cache_lines::fetch(e.as_ptr().cast());
            storage_table::fetch(e.storage());
        }
        cache_lines::tensors(entries.clone().map(|e| e.as_ptr().cast()));
        let _ = with(|m| {
            m.fetch_device_copies(entries);
            Ok(())
        });
    }

    /// The device copy of an input, as the op gets it (the input itself when nothing moves).
    pub(crate) fn acquire(&mut self, entry: &Arc<Entry>, write: bool) -> Result<Arc<Entry>> {
        self.check()?;
        let unmoved = || Ok(entry.clone());
        if ON_THE_TENSOR.contains(&self.op) {
            return unmoved();
        }
        let grad_op = GRAD_OPS.contains(&self.op);
        // Grad mode is read (two calls into libtorch) only for an input that autograd concerns:
        // one written, or one that requires grad; not for the plain reads of inference.
        let requires_grad = crate::residency::torch_storage::requires_grad(entry);
        let recording = (write || requires_grad) && !grad_op && crate::residency::autograd::grad_enabled();
        if write && recording && requires_grad && entry.is_leaf() {
            // What libtorch says without a manager, where a device copy would not be a leaf.
            return Err(Error::InvalidArg(format!("`{}`: a leaf Variable that requires grad is being used in an in-place operation.", self.op)));
        }
        if !self.moves {
            return unmoved();
        }
        if self.op == "zero_grad" {
            // Only the gradient is needed, not the parameter's data: an empty tensor carries it.
            let grad = self.load_grad(entry, true)?;
            let holder = tch::Tensor::f_empty([0], (entry.kind(), grad.as_ref().map_or(tch::Device::Cpu, tch::Tensor::device)))?;
            grad.map_or(Ok(()), |g| crate::residency::autograd::set_grad(&holder, &g))?;
            return Ok(Arc::new(Entry::new(holder)));
        }
        let view = self.acquire_storage(entry, entry, write)?;
        let input = crate::residency::torch_storage::tensor_impl(entry);
        if let Some(first) = self.views.iter().find(|v| v.input == input) {
            return Ok(first.placed.clone());
        }
        if grad_op {
            if let Some(grad) = self.load_grad(entry, false)? {
                crate::residency::autograd::set_grad(&view, &grad)?;
            }
        } else if requires_grad && (recording || self.op == "backward") {
            if entry.is_leaf() {
                crate::residency::training::grads::connect_leaf(&view, entry)?;
            } else {
                crate::residency::autograd::connect_grad(&view, entry)?;
            }
        }
        if write && recording {
            self.written.push((entry.shallow_clone(), view.shallow_clone()));
        }
        let placed = crate::registry::share(Entry::recycled(view));
        let view = crate::residency::torch_storage::tensor_impl(&placed);
        self.views.push(View { input, view, placed: placed.clone(), original: entry.clone() });
        Ok(placed)
    }

    /// The device copy of the storage `entry` stands for, viewed as `like` (a tensor over that
    /// storage), for a front door whose tensors are not the registry's: the `tensorref` device,
    /// where autograd runs above the manager and nothing here joins graphs. Each call holds the
    /// storage once more and returns a view of its own.
    pub(crate) fn acquire_as(&mut self, entry: &Entry, like: &tch::Tensor, write: bool) -> Result<tch::Tensor> {
        self.check()?;
        if !self.moves {
            entry.take_fresh(); // the op reads or writes the home itself
            return Ok(crate::residency::torch_storage::view_on(entry, like)?);
        }
        self.acquire_storage(entry, like, write)
    }

    fn acquire_storage(&mut self, entry: &Entry, like: &tch::Tensor, write: bool) -> Result<tch::Tensor> {
        let a = with(|m| m.acquire_as(entry, like, write, self.op))?;
        if let (TraceKey::Persistent(id), true) = (a.key, a.used_before) {
            // The op's anchor signature (`anchor`): FNV-1a over the already-used persistent
            // inputs, each with its place among the op's inputs and whether the op read it
            // contiguous.
            let read_as = u64::from(crate::residency::torch_storage::is_contiguous(like)) << 63;
            self.anchor = fnv(fnv(self.anchor, self.acquired.len() as u64), id ^ read_as);
            self.anchored = true;
        }
        self.acquired.push(a.storage);
        if !self.record.iter().any(|r| r.0 == a.key) {
            self.record.push((a.key, a.bytes));
        }
        Ok(a.view)
    }

    /// The op's anchor signature, by which an iteration the program does not mark is found
    /// (`Trace::op_end`), if it read a persistent storage it had read before: its inputs' part
    /// with the op's name (its interned pointer) folded in. Name, place and reading tell a
    /// weight read in forward (`x @ w`) from the same weight read in backward (`grad @ w.t()`,
    /// `w` transposed; `w @ grad.t()` where `x` was a transposed view) and by the optimizer:
    /// were they one anchor, a training step would be found as two iterations or three, none
    /// repeating the one before, and Flow would follow none.
    fn anchor(&self) -> Option<u64> {
        self.anchored.then(|| fnv(self.anchor, self.op.as_ptr() as u64))
    }

    /// The device copy of a parameter's gradient, if it has one (held until the op ends).
    fn load_grad(&mut self, param: &Entry, write: bool) -> Result<Option<tch::Tensor>> {
        let grad = param.f_grad()?;
        if !grad.defined() {
            return Ok(None);
        }
        let grad = Arc::new(Entry::new(crate::residency::training::grads::alias(&grad)?));
        let device = self.acquire_storage(&grad, &grad, write)?;
        self.grads.push(grad);
        Ok(Some(device))
    }

    /// After an op that recorded a graph: each tensor written through its device copy takes
    /// the copy's new gradient function.
    fn follow_written(&mut self) -> Result<()> {
        for (tensor, view) in std::mem::take(&mut self.written) {
            if view.requires_grad() {
                crate::residency::autograd::connect_grad(&tensor, &view)?;
            }
        }
        Ok(())
    }

    /// Places the op's result: on the device with the policy's rules when the op ran there,
    /// else (a creation op) in host memory as an ordinary entry. A new storage keeps `recipe`.
    /// On an error (out of memory, budget) the ticket stays open, so the op can be retried.
    pub(crate) fn finish(&mut self, result: tch::Tensor, recipe: Option<Recipe>) -> Result<Entry> {
        self.check()?;
        if !self.moves || self.acquired.is_empty() {
            self.end()?;
            return Ok(Entry::new(result));
        }
        let made = crate::residency::torch_storage::tensor_impl(&result);
        if let Some(v) = self.views.iter().find(|v| v.view == made) {
            let input = v.original.shallow_clone();
            self.end()?;
            return Ok(Entry::new(input));
        }
        let recipe = recipe.map(|mut r| {
            r.kernel_bytes = self.kernel_bytes.get();
            r
        });
        let graph = crate::residency::torch_storage::requires_grad(&result).then(|| result.shallow_clone());
        let anchor = self.anchor();
        let acquired = std::mem::take(&mut self.acquired);
        let reserved = self.reserved.take().unwrap_or(0);
        let placed = with(|m| m.place_reserved(reserved, |m| m.place_result(&result, self.op, &self.record, anchor, recipe)));
        let entry = match placed {
            Ok(entry) => entry,
            Err(e) => {
                self.acquired = acquired;
                return Err(e);
            }
        };
        crate::residency::core::room::finish_op(Some(self.op), acquired)?;
        if let Some(result) = graph {
            crate::residency::autograd::connect_grad(&entry, &result)?;
        }
        self.follow_written()?;
        Ok(entry)
    }

    /// Places each of an op's results (a new storage each, or a view of a storage the manager
    /// knows), then ends the op; for `acquire_as`'s front door. A new storage keeps its recipe
    /// from `recipes` (one per result). The trace records the op once per result, so that each
    /// has a key of its own, and with its anchor once: as the anchor of each, the results of an
    /// op over lists (`_foreach_sqrt` of 41 tensors) would be found as iterations 16 ops long.
    /// The stats count it once. On an error the ticket stays open, as with `finish`.
    pub(crate) fn finish_many(&mut self, results: &[tch::Tensor], recipes: Option<Vec<Recipe>>) -> Result<Vec<Entry>> {
        self.check()?;
        if !self.moves || self.acquired.is_empty() {
            self.end()?;
            return Ok(results.iter().map(|r| Entry::new(r.shallow_clone())).collect());
        }
        let anchor = self.anchor();
        let (op, record, kernel_bytes) = (self.op, &self.record, self.kernel_bytes.get());
        let mut recipes = recipes.map(Vec::into_iter);
        let reserved = self.reserved.take().unwrap_or(0);
        let placed = with(|m| {
            let placed = m.place_reserved(reserved, |m| {
                results
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let recipe = recipes.as_mut().and_then(Iterator::next).map(|mut recipe| {
                            recipe.kernel_bytes = kernel_bytes;
                            recipe
                        });
                        m.place_result(r, op, record, anchor.filter(|_| i == 0), recipe)
                    })
                    .collect::<Result<Vec<_>>>()
            })?;
            m.stats.ops -= results.len().saturating_sub(1) as u64; // one op, however many results
            Ok(placed)
        })?;
        let acquired = std::mem::take(&mut self.acquired);
        crate::residency::core::room::finish_op(Some(self.op), acquired)?;
        Ok(placed)
    }

    /// Ends an op that made no tensor.
    pub(crate) fn end(&mut self) -> Result<()> {
        self.check()?;
        let anchor = self.anchor();
        let acquired = std::mem::take(&mut self.acquired);
        let reserved = self.reserved.take().unwrap_or(0);
        with(|m| {
            m.cancel_reservation(reserved);
            m.end_op(self.op, &self.record, None, anchor);
            Ok(())
        })?;
        crate::residency::core::room::finish_op(Some(self.op), acquired)?;
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
        let reserved = self.reserved.take().unwrap_or(0);
        if reserved > 0 {
            let _ = with(|m| {
                m.cancel_reservation(reserved);
                Ok(())
            });
        }
        let acquired = std::mem::take(&mut self.acquired);
        if acquired.is_empty() {
            return;
        }
        let _ = crate::residency::core::room::finish_op(None, acquired);
    }
}

/// One step of FNV-1a over 64-bit words.
fn fnv(hash: u64, word: u64) -> u64 {
    (hash ^ word).wrapping_mul(0x100_0000_01b3)
}

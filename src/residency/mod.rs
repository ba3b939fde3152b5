//! The residency manager (spec: shared/spec/residency.md): one per process, it decides where
//! each tensor's bytes live so that a model larger than the accelerator runs on it under a hard
//! byte budget. Ops never name a device: through `Ticket` the manager brings inputs to the
//! compute device before an op and places its result after.
//!
//! Files: `manager` (state and moves), `policy` (the trait) with `resident`, `genoa`, `flow`,
//! `trace` (learned access order, offline optimum), `device` (copies) with `cuda` (side-stream
//! copies through src/native/streams.cpp), `report` (stats, events, timeline). Autograd through managed tensors is refused for now: run managed ops under
//! `no_grad` (inference), or without a manager.

mod cuda;
mod device;
mod flow;
mod genoa;
mod manager;
mod policy;
mod report;
mod resident;
mod trace;

pub use device::ComputeDevice;
pub use policy::PolicyKind;
pub use report::{Event, EventKind, ResidencyStats};
pub use trace::{offline_min_loads, NormKey, OpRecord};

use crate::error::{Error, Result};
use crate::registry::Entry;
use crate::tensor::Tensor;
use manager::Manager;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use trace::TraceKey;

/// How the manager runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub device: ComputeDevice,
    /// Hard limit on the bytes the manager holds on the device (ignored by Resident).
    pub budget: u64,
    pub policy: PolicyKind,
    /// Page-locked host copies, so CUDA copies are asynchronous.
    pub pin_host_memory: bool,
    /// How many ops ahead Flow prefetches once it follows a recorded trace (0: no prefetch).
    pub prefetch_depth: usize,
    /// The simulated accelerator's physical memory: an op result that does not fit raises
    /// out-of-memory as a real device would (None: unlimited).
    pub simulated_capacity: Option<u64>,
}

impl Config {
    pub fn new(device: ComputeDevice, policy: PolicyKind, budget: u64) -> Config {
        Config { device, budget, policy, pin_host_memory: true, prefetch_depth: 2, simulated_capacity: None }
    }
}

static MANAGER: Mutex<Option<Manager>> = Mutex::new(None);
static ACTIVE: AtomicBool = AtomicBool::new(false);

fn lock() -> MutexGuard<'static, Option<Manager>> {
    MANAGER.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with<R>(f: impl FnOnce(&mut Manager) -> Result<R>) -> Result<R> {
    match lock().as_mut() {
        Some(m) => f(m),
        None => Err(Error::InvalidArg("no residency manager is configured".into())),
    }
}

/// Whether ops go through a manager (one atomic load on every op).
#[inline]
pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Starts (or replaces) the process's manager. A previous manager first writes every newer
/// device copy back to host memory; its event callback carries over, its counters, pins,
/// trace and timeline do not. Call it while no op runs on another thread: copies a running op
/// uses are written back and dropped.
pub fn configure(cfg: Config) -> Result<()> {
    let mut guard = lock();
    let mut fresh = Manager::new(cfg)?;
    if let Some(old) = guard.as_mut() {
        old.drain()?;
        fresh.report.callback = old.report.callback.take();
    }
    let old = guard.replace(fresh);
    ACTIVE.store(true, Ordering::Release);
    drop(guard);
    drop(old);
    Ok(())
}

/// Stops managing: newer device copies are written home and every device copy is dropped. Call
/// it while no op runs on another thread (as for `configure`).
pub fn disable() -> Result<()> {
    let mut guard = lock();
    if let Some(m) = guard.as_mut() {
        m.drain()?;
    }
    let old = guard.take();
    ACTIVE.store(false, Ordering::Release);
    drop(guard);
    drop(old);
    Ok(())
}

/// Whether a manager is configured.
pub fn enabled() -> bool {
    active()
}

/// The counters since the manager was configured (None without a manager).
pub fn stats() -> Option<ResidencyStats> {
    lock().as_ref().map(|m| m.stats)
}

/// Marks the end of an iteration (a training step, a forward pass): the ops since the previous
/// mark become the recorded trace Flow evicts and prefetches by.
pub fn mark_iteration() -> Result<()> {
    with(|m| {
        m.trace.mark();
        Ok(())
    })
}

/// Keeps `t` resident on the device (`true`) or lets it go (`false`). Pinned bytes count against
/// the budget; pinning more than the budget is `BudgetTooSmall`.
pub fn pin_resident(t: &Tensor, pinned: bool) -> Result<()> {
    let [entry] = crate::registry::get([t.id()])?;
    with(|m| m.pin(&entry, pinned))
}

/// Whether `t` has a copy on the compute device now.
pub fn is_resident(t: &Tensor) -> Result<bool> {
    let [entry] = crate::registry::get([t.id()])?;
    with(|m| Ok(m.is_resident(entry.uid())))
}

/// Calls `f` for every event (load, evict, write-back, prefetch, op begin/end), on the thread
/// that caused it, while the manager is locked: `f` must not call the manager.
pub fn set_event_callback(f: Option<Box<dyn Fn(&Event) + Send + Sync>>) -> Result<()> {
    with(|m| {
        m.report.callback = f;
        Ok(())
    })
}

/// Starts recording events for `write_timeline`.
pub fn start_timeline() -> Result<()> {
    with(|m| {
        m.report.start_timeline();
        Ok(())
    })
}

/// Writes the recorded events as Chrome trace / Perfetto JSON.
pub fn write_timeline(path: &std::path::Path) -> Result<()> {
    let json = with(|m| m.report.timeline_json().ok_or_else(|| Error::InvalidArg("no timeline is being recorded".into())))?;
    std::fs::write(path, json).map_err(|e| Error::InvalidArg(format!("cannot write {}: {e}", path.display())))
}

/// The last recorded iteration (for computing the offline optimum), if any.
pub fn recorded_trace() -> Option<Vec<OpRecord>> {
    lock().as_ref().and_then(|m| m.trace.recorded_ops().map(<[OpRecord]>::to_vec))
}

/// Called when a registered entry dies: its device copy is freed at once.
pub(crate) fn forget(uid: u64) {
    if let Some(m) = lock().as_mut() {
        m.forget(uid);
    }
}

/// The freshest copy of an entry's data (the device copy if it is newer), for reads.
pub(crate) fn readable(entry: &Entry) -> tch::Tensor {
    let fresher = entry.is_registered().then(|| lock().as_ref().and_then(|m| m.freshest(entry.uid()))).flatten();
    fresher.unwrap_or_else(|| entry.shallow_clone())
}

/// Before the home copy's memory is shared outside (DLPack): writes a newer device copy back and
/// drops the device copy, so writes through the shared memory are not shadowed by a stale copy.
pub(crate) fn settle_home(entry: &Entry) -> Result<()> {
    if entry.is_registered() {
        if let Some(m) = lock().as_mut() {
            m.settle_home(entry.uid())?;
        }
    }
    Ok(())
}

/// One op under the manager: its inputs are acquired on the device and held there until the
/// ticket is finished or dropped (on every exit path).
pub(crate) struct Ticket {
    op: &'static str,
    inputs: Vec<(u64, TraceKey, u64)>,
    anchor: u64,
    anchored: bool,
    moves: bool,
}

impl Ticket {
    pub(crate) fn begin(op: &'static str) -> Option<Ticket> {
        let mut guard = lock();
        let m = guard.as_mut()?;
        m.op_begin(op);
        Some(Ticket { op, inputs: Vec::new(), anchor: 0xcbf2_9ce4_8422_2325, anchored: false, moves: m.moves() })
    }

    /// The device copy of an input (the home copy when nothing moves).
    pub(crate) fn acquire(&mut self, entry: &Entry, write: bool) -> Result<tch::Tensor> {
        if entry.requires_grad() && crate::ops::autograd::grad_enabled() {
            return Err(Error::InvalidArg(format!(
                "`{}`: autograd through the residency manager is not supported yet; run the op under no_grad or without a manager",
                self.op
            )));
        }
        if !self.moves {
            return Ok(entry.shallow_clone());
        }
        let (tensor, key, used_before) = with(|m| m.acquire(entry, write, self.op))?;
        if let (TraceKey::Persistent(uid), true) = (key, used_before) {
            // FNV-1a over the already-used persistent inputs: the op's anchor signature.
            self.anchor = (self.anchor ^ uid).wrapping_mul(0x100_0000_01b3);
            self.anchored = true;
        }
        self.inputs.push((entry.uid(), key, entry.bytes()));
        Ok(tensor)
    }

    /// Places the op's result: on the device with the policy's rules when the op ran there,
    /// else (a creation op) in host memory as an ordinary entry. On an error (out of memory,
    /// budget) the ticket stays open, so the op can be retried.
    pub(crate) fn finish(&mut self, result: tch::Tensor) -> Result<Arc<Entry>> {
        if !self.moves || self.inputs.is_empty() {
            self.end()?;
            return Ok(Arc::new(Entry::new(result)));
        }
        let (inputs, anchor) = self.trace_record();
        let entry = with(|m| m.place_result(result, self.op, &inputs, anchor))?;
        self.release_inputs();
        with(|m| {
            m.op_finished(self.op);
            Ok(())
        })?;
        Ok(Arc::new(entry))
    }

    /// Ends an op that made no tensor.
    pub(crate) fn end(&mut self) -> Result<()> {
        let (inputs, anchor) = self.trace_record();
        self.release_inputs();
        with(|m| {
            m.end_op(self.op, &inputs, None, anchor);
            m.op_finished(self.op);
            Ok(())
        })
    }

    /// What the trace records of this op: its inputs (key, bytes) and its anchor signature.
    fn trace_record(&self) -> (Vec<(TraceKey, u64)>, Option<u64>) {
        (self.inputs.iter().map(|i| (i.1, i.2)).collect(), self.anchored.then_some(self.anchor))
    }

    /// Out-of-memory recovery: evicts every device copy no running op uses; returns how many.
    pub(crate) fn evict_unused(&self) -> usize {
        with(|m| {
            m.stats.oom_retries += 1;
            Ok(m.evict_unused())
        })
        .unwrap_or(0)
    }

    fn release_inputs(&mut self) {
        let inputs = std::mem::take(&mut self.inputs);
        if inputs.is_empty() {
            return;
        }
        if let Some(m) = lock().as_mut() {
            inputs.iter().for_each(|i| m.release(i.0));
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.release_inputs();
    }
}

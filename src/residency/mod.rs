//! The residency manager (docs/residency.md): one per process, it decides where
//! each storage's bytes live so that a model larger than the accelerator runs on it under a hard
//! byte budget. Ops never name a device: through `Ticket` the manager brings inputs to the
//! compute device before an op and places its result after.
//!
//! The unit it moves is a storage, not a tensor: views and aliases of one storage share one
//! host home and one device copy, counted once (`storage`). Memory that code outside the library
//! can reach (DLPack imports and exports) is never cached on the device past the op using it, and
//! several storages over the same such memory share one device copy in an op (`external`).
//!
//! Folders, by concern: `core` (the manager's state and moves, storages and their homes, one
//! op's protocol, room on several threads, stats and events), `policy` (the trait, `resident`,
//! `genoa`, and `flow` with its recorded order and prefetch), `device` (copies, CUDA's side
//! streams, the simulated device's memory, injected faults), `training` (saved tensors,
//! gradients, recomputation and the rates it prices with), `model` (the schedule model: the log
//! the manager keeps of a pass, and its replay, a tool for tests and benchmarks).
//!
//! Autograd runs through managed tensors (see `ticket`), and what it saves for backward is
//! managed too (`saved`). A result that can be made again from its inputs may be dropped rather
//! than written back (`recompute`).

mod core;
mod device;
pub mod model;
mod policy;
mod training;

pub use device::Device;
pub use device::memory::{device_memory, simulate_cuda_allocator, DeviceMemory};
#[doc(hidden)]
pub use device::faults::{inject_fault, Fault};
#[doc(hidden)]
pub use device::lag::set_simulated_lag;
pub use policy::Policy;
pub use model::Rates;
pub use training::recipe::Recompute;
pub use self::core::report::{Callback, Event, EventKind, ResidencyStats};
pub use policy::flow::trace::{offline_min_loads, NormKey, OpRecord};
pub(crate) use training::recipe::{Recipe, Replay};
pub(crate) use training::saved::{save as save_for_backward, Saved};
pub(crate) use self::core::ticket::Ticket;
pub(crate) use self::core::torch_storage;
pub(crate) use self::core::cache_lines;
pub(crate) use self::core::id_map::IdMap;
pub(crate) use training::{autograd, python_hooks};
pub(crate) use self::core::room::with_room;

use crate::error::{Error, Result};
use crate::registry::{Entry, TensorId};
use device::Transfer;
use self::core::manager::Manager;
use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// How the manager runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub device: Device,
    /// Hard limit on the bytes the manager holds on the device (ignored by Resident).
    pub budget_bytes: u64,
    pub policy: Policy,
    /// Page-locked host homes, so CUDA copies are asynchronous and run at full speed. A tensor
    /// made elsewhere is moved into page-locked memory once, the first time the manager sees it.
    pub pin_host_memory: bool,
    /// How many recorded ops ahead Flow looks for loads to start while the budget has room
    /// (0: no prefetch).
    pub prefetch_depth: usize,
    /// The simulated accelerator's physical memory: an op result that does not fit raises
    /// out-of-memory as a real device would (None: unlimited).
    pub simulated_capacity: Option<u64>,
    /// Whether evicted results that can be made again are dropped rather than written back
    /// (see `recompute`; Resident, which evicts nothing, ignores it).
    pub recompute: Recompute,
    /// The device's rates `Recompute::Cheaper` prices remakes and copies with (None: the
    /// device's own, `Device::rates`: measured as the manager starts on CUDA, the
    /// `Rates::H100` preset on the simulated device).
    pub rates: Option<Rates>,
}

/// Flow looks ahead this many recorded ops by default: in practice, as far as the budget allows.
pub const DEFAULT_PREFETCH_DEPTH: usize = 256;

impl Config {
    pub fn new(device: Device, policy: Policy, budget_bytes: u64) -> Config {
        Config { device, budget_bytes, policy, pin_host_memory: true, prefetch_depth: DEFAULT_PREFETCH_DEPTH, simulated_capacity: None, recompute: Recompute::Off, rates: None }
    }
}

static MANAGER: Mutex<Option<Manager>> = Mutex::new(None);
static ACTIVE: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread holds the manager (it is running the manager's code, or an event callback).
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// Entries that died while their thread held the manager (in an event callback, say): forgotten
/// the next time the manager is taken.
static DEFERRED: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static ANY_DEFERRED: AtomicBool = AtomicBool::new(false);

/// The locked manager. Taking it on a thread that already holds it is an error rather than a
/// deadlock: an event callback that calls back into the library gets a clear message.
/// While it is held, what the thread allocates is host memory (a home, a record), even inside
/// an op's kernel; the manager counts its loads and remakes itself (`device_memory`).
struct Held {
    guard: MutexGuard<'static, Option<Manager>>,
    _host: Option<device::memory::Scope>,
}

impl Drop for Held {
    fn drop(&mut self) {
        HOLDING.with(|h| h.set(false));
    }
}

impl Deref for Held {
    type Target = Option<Manager>;
    fn deref(&self) -> &Option<Manager> {
        &self.guard
    }
}

impl DerefMut for Held {
    fn deref_mut(&mut self) -> &mut Option<Manager> {
        &mut self.guard
    }
}

fn lock() -> Result<Held> {
    if HOLDING.with(Cell::get) {
        return Err(Error::InvalidArg(
            "the residency manager was called from inside its own event callback (or while it was busy on this thread): \
             an event callback must not call libtensorref"
                .into(),
        ));
    }
    let guard = MANAGER.lock().unwrap_or_else(PoisonError::into_inner);
    let mut held = Held { guard, _host: device::memory::Scope::host() };
    HOLDING.with(|h| h.set(true));
    // A load first, on every lock (several an op): the exchange, a locked instruction, only
    // once something was deferred.
    if ANY_DEFERRED.load(Ordering::Acquire) && ANY_DEFERRED.swap(false, Ordering::AcqRel) {
        let storages = std::mem::take(&mut *DEFERRED.lock().unwrap_or_else(PoisonError::into_inner));
        if let Some(m) = held.as_mut() {
            storages.into_iter().for_each(|id| m.forget(id, false));
        }
    }
    Ok(held)
}

fn with<R>(f: impl FnOnce(&mut Manager) -> Result<R>) -> Result<R> {
    match lock()?.as_mut() {
        Some(m) => f(m),
        None => Err(Error::InvalidArg("no residency manager is configured".into())),
    }
}

/// Whether ops go through a manager (one atomic load on every op).
#[inline]
pub(crate) fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Waits for copies into host homes, outside the manager's lock.
fn wait_all(transfers: Vec<Arc<Transfer>>) -> Result<()> {
    transfers.iter().try_for_each(|t| t.wait_on_host())
}

/// Starts (or replaces) the process's manager. A previous manager first writes every newer
/// device copy back to host memory; its event callback carries over, its counters, pins,
/// trace and timeline do not. Call it while no op runs on another thread: copies a running op
/// uses are written back and dropped.
pub fn configure(cfg: Config) -> Result<()> {
    crate::registry::on_forget(forget);
    crate::registry::on_recycled(self::core::op_views::done);
    // The device's rates are measured before the manager's lock is taken: measuring waits on it.
    let cfg = match cfg.rates {
        None if cfg.recompute == Recompute::Cheaper => {
            cfg.device.check_available()?;
            Config { rates: Some(cfg.device.rates()?), ..cfg }
        }
        _ => cfg,
    };
    let mut guard = lock()?;
    if cfg.device == Device::Simulated {
        device::memory::install();
    }
    let mut fresh = Manager::new(cfg)?;
    let mut writing = vec![];
    if let Some(old) = guard.as_mut() {
        writing = old.drain()?;
        fresh.report.callback = old.report.callback.take();
    }
    device::memory::device_memory(true); // the peak from this manager's start, after the last's drain
    let moves = fresh.moves();
    let old = guard.replace(fresh);
    ACTIVE.store(true, Ordering::Release);
    drop(guard);
    training::saved::manage(moves)?;
    wait_all(writing)?;
    drop(old);
    Ok(())
}

/// Stops managing: newer device copies are written home and every device copy is dropped. Call
/// it while no op runs on another thread (as for `configure`).
pub fn disable() -> Result<()> {
    let mut guard = lock()?;
    let writing = match guard.as_mut() {
        Some(m) => m.drain()?,
        None => vec![],
    };
    let old = guard.take();
    ACTIVE.store(false, Ordering::Release);
    drop(guard);
    training::saved::manage(false)?;
    wait_all(writing)?;
    drop(old);
    self::core::room::freed();
    Ok(())
}

/// Some(cuda) when new host tensors should be made page-locked (a manager that moves data with
/// page-locked homes is configured; `cuda`: with CUDA's allocator), else None.
pub(crate) fn page_locked_homes() -> Option<bool> {
    if !active() {
        return None;
    }
    let held = lock().ok()?;
    let m = held.as_ref()?;
    (m.moves() && m.cfg.pin_host_memory).then(|| m.cfg.device.cuda())
}

/// Gives the storage autograd saved `t` into during the running op (a draw the op made inside
/// itself: dropout's noise) the recipe `replay`, which takes no inputs, so that a manager that
/// recomputes may drop it and draw it again.
pub(crate) fn keep_saved_recipe(t: &tch::Tensor, op: &'static str, replay: Replay) -> Result<()> {
    if !active() {
        return Ok(());
    }
    with(|m| m.keep_saved_recipe(t, op, replay))
}

/// Whether a manager is configured.
pub fn enabled() -> bool {
    active()
}

/// Whether the tensors autograd saves for backward are managed by the library's engine hooks (a
/// manager that moves data is configured, and backward runs on libtorch's engine: not where
/// PyTorch's Python engine does, whose hooks the Python binding sets, src/ffi/saved.rs, nor after
/// torch was imported into the process since the manager was configured).
pub fn saved_tensors_managed() -> bool {
    crate::residency::autograd::saved_managed()
}

/// The counters since the manager was configured (None without a manager), with the CUDA
/// caching allocator's reserved bytes read now.
pub fn stats() -> Option<ResidencyStats> {
    let mut stats = lock().ok()?.as_mut().map(|m| {
        m.count_stalls();
        (m.stats, m.cfg.device)
    })?;
    if let (s, Device::Cuda(index)) = &mut stats {
        (s.reserved_bytes, s.peak_reserved_bytes) = device::cuda::reserved(*index).unwrap_or_default();
    }
    Some(stats.0)
}

/// Whether the manager holds the storage `entry` views (it may then have a newer device copy).
pub(crate) fn knows(entry: &crate::registry::Entry) -> Result<bool> {
    match lock()?.as_ref() {
        Some(m) => Ok(m.find(entry)?.is_some()),
        None => Ok(false),
    }
}

/// The CUDA device the manager computes on (None without one, or on the host).
pub(crate) fn cuda_index() -> Option<usize> {
    match lock().ok()?.as_ref()?.cfg.device {
        Device::Cuda(index) => Some(index),
        _ => None,
    }
}

/// Starts the peak of device bytes (`ResidencyStats::peak_device_bytes`) again from the bytes
/// held now (`torch.accelerator.reset_peak_memory_stats()` on the `tensorref` device). No-op
/// without a manager.
pub(crate) fn restart_peak() -> Result<()> {
    if let Some(m) = lock()?.as_mut() {
        m.stats.peak_device_bytes = m.stats.device_bytes;
    }
    Ok(())
}

/// How many bytes of tensors one op over lists of parameters (a foreach or fused optimizer step)
/// may read, where a budget bounds what an op may hold (a manager that moves data, under Genoa
/// or Flow): a quarter of the budget, so that its inputs, its results and the copies it
/// displaces fit beside each other. 0 where nothing bounds an op.
pub(crate) fn list_op_bytes() -> u64 {
    let bound = |m: &Manager| (m.moves() && m.policy.bounded()).then_some(m.cfg.budget_bytes / 4);
    lock().ok().and_then(|held| held.as_ref().and_then(bound)).unwrap_or(0)
}

/// Under a CUDA manager, gives the caching allocator's unused blocks back and starts its reserved
/// peak (`ResidencyStats::peak_reserved_bytes`) anew, so that a benchmark's run reports its own
/// (the allocator's peak is the process's, across managers). Nothing elsewhere.
#[doc(hidden)]
pub fn reset_reserved_peak() -> Result<()> {
    match lock()?.as_ref().map(|m| m.cfg.device) {
        Some(Device::Cuda(index)) => device::cuda::reset_peak(index),
        _ => Ok(()),
    }
}

/// Marks the end of an iteration (a training step, a forward pass): the ops since the previous
/// mark become the recorded trace Flow evicts and prefetches by.
pub fn mark_iteration() -> Result<()> {
    with(|m| {
        m.mark_iteration();
        Ok(())
    })
}

/// Keeps a tensor's storage resident on the device (`true`) or lets it go (`false`); see
/// `Tensor::pin_resident`.
pub(crate) fn pin(id: TensorId, pinned: bool) -> Result<()> {
    let [entry] = crate::registry::get([id])?;
    with(|m| m.pin(&entry, pinned))
}

/// Whether a tensor's storage has a copy on the compute device now.
pub(crate) fn resident(id: TensorId) -> Result<bool> {
    let [entry] = crate::registry::get([id])?;
    with(|m| m.is_resident(&entry))
}

/// Calls `f` for every event (load, evict, write-back, prefetch, op begin/end), on the thread
/// that caused it, while the manager is locked: if `f` calls the manager, that call fails (a
/// tensor released inside `f` is freed once the manager is free).
pub fn set_callback(f: Option<Callback>) -> Result<()> {
    with(|m| {
        m.report.callback = f;
        Ok(())
    })
}

/// Starts recording events for `timeline_write`.
pub fn timeline_start() -> Result<()> {
    with(|m| {
        m.report.start_timeline();
        Ok(())
    })
}

/// Writes the recorded events: to a path ending in `.svg`, a picture of memory over time (the
/// device bytes stacked by what they hold, the budget line, loads, prefetches and write-backs,
/// where iterations began); to any other, Chrome trace / Perfetto JSON.
pub fn timeline_write(path: &std::path::Path) -> Result<()> {
    let svg = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    let text = with(|m| {
        let none = || Error::InvalidArg("no timeline is being recorded (call timeline_start first)".into());
        match svg {
            true => {
                let device = format!("{:?}", m.cfg.device).to_lowercase();
                let title = format!("{:?} on the {device} device", m.cfg.policy);
                m.report.timeline().map(|t| self::core::picture::svg(t, m.stats.budget, &title)).ok_or_else(none)
            }
            false => m.report.timeline_json().ok_or_else(none),
        }
    })?;
    std::fs::write(path, text).map_err(|e| Error::Io(format!("cannot write {}: {e}", path.display())))
}

/// The last recorded iteration (for computing the offline optimum), if any.
pub fn recorded_trace() -> Option<Vec<OpRecord>> {
    lock().ok()?.as_ref().and_then(|m| m.trace.recorded_ops().map(<[OpRecord]>::to_vec))
}

/// Starts logging what the schedule model needs (each op, and each load with what it waited
/// for); the log of the last complete iteration is `schedule_log`. Under `Recompute::Cheaper`,
/// which prices with it, the manager logs from the start, and this keeps that log.
pub fn schedule_log_start() -> Result<()> {
    with(|m| {
        m.start_schedule_log();
        Ok(())
    })
}

/// The last complete iteration's schedule log (see `schedule`), if one was started and an
/// iteration has ended since.
pub fn schedule_log() -> Option<model::Pass> {
    lock().ok()?.as_ref().and_then(|m| m.schedule_log())
}

/// The schedule model of the last complete iteration the manager logged (`schedule_log_start`,
/// then an iteration's end) at the rates it prices with, its matrix products counting elements
/// of `element_bytes` (1, 2, 4 or 8) bytes. Errors: InvalidArg without a manager, with another
/// element size, or before an iteration was logged.
pub fn schedule_model(element_bytes: usize) -> Result<model::ScheduleModel> {
    if ![1, 2, 4, 8].contains(&element_bytes) {
        return Err(Error::InvalidArg(format!("element_bytes is {element_bytes}, not 1, 2, 4 or 8")));
    }
    with(|m| {
        let pass = m.schedule_log().ok_or_else(|| Error::InvalidArg("no iteration was logged for the schedule model: start the log, then mark an iteration's end".into()))?;
        Ok(model::ScheduleModel::of(&pass, m.rates, element_bytes))
    })
}

/// Called (through the registry's hook, `configure` installs it) when a registered entry dies,
/// with its tensor: its storage's device copy is freed once no other view of it lives. The
/// tensor's reference to the storage goes with it only if no other handle shares its TensorImpl
/// (an op may return its input: `contiguous` of a contiguous tensor). On a thread that holds the
/// manager (an event callback releasing a tensor) the entry is forgotten when the manager is next
/// taken.
pub(crate) fn forget(storage: u64, tensor: &tch::Tensor) {
    match lock() {
        Ok(mut held) => {
            if let Some(m) = held.as_mut() {
                m.forget(storage, crate::residency::torch_storage::tensor_holders(tensor) == 1);
            }
        }
        Err(_) => {
            DEFERRED.lock().unwrap_or_else(PoisonError::into_inner).push(storage);
            ANY_DEFERRED.store(true, Ordering::Release);
        }
    }
}

/// Readers of host memory now running; memory a home moved out of is freed only when none is.
static READERS: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn readers() -> usize {
    READERS.load(Ordering::SeqCst)
}

/// The current data of an entry for reading (the device copy if it is newer), held as a reader
/// while it lives.
pub(crate) struct Readable(tch::Tensor);

impl Deref for Readable {
    type Target = tch::Tensor;
    fn deref(&self) -> &tch::Tensor {
        &self.0
    }
}

impl Drop for Readable {
    fn drop(&mut self) {
        READERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The freshest copy of an entry's data, for reads. Waits (outside the manager's lock) for a
/// write-back still copying into its home.
pub(crate) fn readable(entry: &Entry) -> Result<Readable> {
    READERS.fetch_add(1, Ordering::SeqCst);
    let mut read = Readable(entry.shallow_clone());
    if !active() {
        return Ok(read);
    }
    let (tensor, writing) = with_room(|| with(|m| m.readable(entry)))?;
    read.0 = tensor;
    if let Some(w) = writing {
        w.wait_on_host()?;
        let _ = with(|m| {
            m.stats.read_waits += 1;
            Ok(())
        });
    }
    Ok(read)
}

/// `t`, a tensor over a storage's home that no registered view is (a leaf's gradient), is let go:
/// the storage is forgotten now if nothing else holds its home, rather than at a later check.
pub(crate) fn let_go(t: tch::Tensor) -> Result<()> {
    if !active() {
        return Ok(());
    }
    with(|m| {
        let id = m.home_of(&t)?;
        drop(t);
        if let Some(id) = id {
            m.forget_unheld(id, 0);
        }
        Ok(())
    })
}

/// Before an entry's home memory is shared outside (DLPack export): marks its storage external
/// (never cached on the device again, never moved), writes a newer device copy back and waits
/// for it, so the outside reads current data and its writes are not shadowed by a stale copy.
pub(crate) fn settle_home(entry: &Entry) -> Result<()> {
    crate::residency::torch_storage::mark_external(entry)?;
    if !active() {
        return Ok(());
    }
    let writing = with(|m| m.settle_home(entry))?;
    wait_all(writing)
}

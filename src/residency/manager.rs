//! The manager's state and its moves, over storages (see `storage`): which storage a tensor
//! views, loads, evictions (a clean copy is dropped for free, a newer one is written back
//! asynchronously), result placement (a view of an input shares its storage; a new storage gets
//! a home without memory until it must leave the device), and prefetch by bytes.
//!
//! One manager per process behind one mutex (`super::MANAGER`). Copies are started while it is
//! held, so the accounting is exact at every event, but the host never waits on the GPU under
//! it: the waits a caller owes (a read of a home still being written, memory shared with the
//! outside) are handed back and waited for after the lock is released. The policy only chooses
//! victims and sets the rules.

use super::device::{ComputeDevice, Transfer};
use super::policy::{self, Candidate, Policy};
use super::report::{Event, EventKind, Reporter, ResidencyStats};
use super::schedule::Log;
use super::storage::{Home, Storage};
use super::trace::{Trace, TraceKey};
use super::Config;
use crate::error::{Error, Result};
use crate::native;
use crate::registry::Entry;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// Pageable memory that homes were moved out of (see `pin_home`), freed once no reader can be
/// using it. Not the manager's: a read may outlive the manager that started it.
static RETIRED: Mutex<Vec<tch::Tensor>> = Mutex::new(Vec::new());

/// Runs a request for page-locked memory; returns its result and how many new allocations it
/// took (0 when the allocator's cache served it: microseconds on CUDA rather than milliseconds).
fn page_locked<R>(cuda: bool, request: impl FnOnce() -> std::result::Result<R, tch::TchError>) -> Result<(R, u64)> {
    let before = native::page_locked_allocations(cuda);
    let result = request()?;
    Ok((result, native::page_locked_allocations(cuda).saturating_sub(before)))
}

/// What `acquire` gives an op for one input.
pub(crate) struct Acquired {
    /// The input's view of its storage's device copy.
    pub(crate) view: tch::Tensor,
    pub(crate) storage: u64,
    pub(crate) key: TraceKey,
    pub(crate) bytes: u64,
    /// An earlier op used the storage (it is not new to this iteration).
    pub(crate) used_before: bool,
}

pub(crate) struct Manager {
    pub(crate) cfg: Config,
    policy: Box<dyn Policy>,
    storages: HashMap<u64, Storage>,
    /// Home StorageImpl address -> storage.
    by_home: HashMap<usize, u64>,
    /// Registered entry -> the storage it views.
    entries: HashMap<u64, u64>,
    next_id: u64,
    /// Write-backs of external memory the running op must wait for before it returns.
    owed: Vec<Arc<Transfer>>,
    pub(crate) stats: ResidencyStats,
    clock: u64,
    pub(crate) trace: Trace,
    pub(crate) report: Reporter,
    pub(crate) schedule: Option<Log>,
}

impl Manager {
    pub(crate) fn new(cfg: Config) -> Result<Manager> {
        cfg.device.check_available()?;
        let policy = policy::make(cfg.policy);
        if policy.bounded() && cfg.budget == 0 {
            return Err(Error::InvalidArg(format!("{:?} needs a device budget above 0 bytes", cfg.policy)));
        }
        let stats = ResidencyStats { budget: if policy.bounded() { cfg.budget } else { u64::MAX }, ..Default::default() };
        Ok(Manager {
            cfg,
            policy,
            storages: HashMap::new(),
            by_home: HashMap::new(),
            entries: HashMap::new(),
            next_id: 1,
            owed: Vec::new(),
            stats,
            clock: 0,
            trace: Trace::default(),
            report: Reporter::new(),
            schedule: None,
        })
    }

    /// Whether anything moves: on the CPU the manager only counts ops.
    pub(crate) fn moves(&self) -> bool {
        self.cfg.device != ComputeDevice::Cpu
    }

    fn cuda(&self) -> bool {
        self.cfg.device.cuda()
    }

    fn event(&mut self, kind: EventKind, storage: u64, bytes: u64, op: &'static str, started: Option<Instant>) {
        let duration_us = started.map_or(0.0, |s| s.elapsed().as_secs_f64() * 1e6);
        if let Some(s) = started {
            self.stats.transfer_wait_ns += s.elapsed().as_nanos() as u64;
        }
        let time_us = self.report.now_us();
        let device_bytes = self.stats.device_bytes;
        self.report.emit(Event { kind, entry: storage, bytes, device_bytes, op, time_us, duration_us });
    }

    pub(crate) fn op_begin(&mut self, op: &'static str) {
        self.event(EventKind::OpBegin, 0, 0, op, None);
    }

    // ------------------------------------------------------------ storages

    /// The storage `entry` views, registering it (and the storage, the first time) if needed.
    fn storage_of(&mut self, entry: &Entry) -> Result<u64> {
        if let Some(&id) = self.entries.get(&entry.uid()) {
            return Ok(id);
        }
        let info = native::storage(entry, self.cuda())?;
        let id = match self.by_home.get(&info.id) {
            Some(&id) => id,
            None => self.add_storage(entry, info)?,
        };
        self.attach(entry, id);
        Ok(id)
    }

    /// The storage `entry` views if the manager knows it (nothing is registered).
    fn find(&self, entry: &Entry) -> Result<Option<u64>> {
        if let Some(&id) = self.entries.get(&entry.uid()) {
            return Ok(Some(id));
        }
        let info = native::storage(entry, self.cuda())?;
        Ok(self.by_home.get(&info.id).copied())
    }

    fn attach(&mut self, entry: &Entry, id: u64) {
        entry.registered.store(true, Ordering::Release);
        self.entries.insert(entry.uid(), id);
        self.storages.get_mut(&id).expect("attached to a known storage").views += 1;
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id - 1
    }

    /// Registers the storage of a tensor made outside the manager. Pageable memory of ours is
    /// moved into page-locked memory now, once (see `pin_home`).
    fn add_storage(&mut self, entry: &Entry, info: native::StorageInfo) -> Result<u64> {
        let id = self.new_id();
        let home = native::storage_bytes(entry)?;
        let on_device = self.cuda() && entry.device() == self.cfg.device.tch();
        let kind = match () {
            _ if on_device => Home::OnDevice,
            _ if info.external() => Home::External { page_locked: info.page_locked() },
            _ if info.page_locked() => Home::PageLocked,
            _ => Home::Pageable,
        };
        let mut s = Storage::new(home, kind, info.nbytes, TraceKey::Persistent(id));
        s.home_id = info.id;
        if on_device {
            s.device = Some(s.home.shallow_clone());
            s.device_id = info.id;
        }
        if kind == Home::Pageable && self.moves() && self.cfg.pin_host_memory {
            self.pin_home(&mut s)?;
        }
        self.by_home.insert(info.id, id);
        self.storages.insert(id, s);
        Ok(id)
    }

    /// Moves a home into page-locked memory, copying it once. Why copy rather than register the
    /// memory in place (cudaHostRegister): measured on an H100, registering took 375 ms per GiB
    /// while copying into memory from CUDA's caching host allocator runs at host memory speed
    /// (about 3 ms per 64 MiB, 50 ms per GiB), and registered memory would have to be
    /// unregistered before whoever owns it frees it. The home's StorageImpl takes the new memory,
    /// so every view of it follows; the old memory is freed once no reader can still use it.
    fn pin_home(&mut self, s: &mut Storage) -> Result<()> {
        let (old, new) = page_locked(self.cuda(), || native::home_pin(&s.home, self.cuda()))?;
        RETIRED.lock().unwrap_or_else(PoisonError::into_inner).push(old);
        s.kind = Home::PageLocked;
        self.stats.count_page_locked(new, s.bytes);
        Ok(())
    }

    /// Frees the memory homes moved out of, if no reader is running.
    fn free_retired(&self) {
        let mut retired = RETIRED.lock().unwrap_or_else(PoisonError::into_inner);
        if !retired.is_empty() && super::readers() == 0 {
            retired.clear();
        }
    }

    // ------------------------------------------------------------ ops

    /// The device copy of `entry`'s storage for a running op, loaded if needed (making room
    /// first), as `entry`'s view of it. The storage is in use until `release`. With `write`,
    /// the device copy becomes the newer one.
    pub(crate) fn acquire(&mut self, entry: &Entry, write: bool, op: &'static str) -> Result<Acquired> {
        let id = self.storage_of(entry)?;
        let (clock, following) = (self.clock, self.trace.following() && self.policy.prefetches());
        let s = self.storages.get_mut(&id).expect("registered above");
        let used_before = s.uses > 0;
        s.in_use += 1;
        s.last_use = clock;
        s.uses += 1;
        let (bytes, key, resident) = (s.bytes, s.key, s.resident());
        if resident {
            if std::mem::take(&mut s.prefetched) {
                self.stats.prefetch_hits += 1;
            }
        } else {
            if following {
                self.stats.prefetch_misses += 1;
            }
            if let Err(e) = self.make_room(bytes, op).and_then(|()| self.load(id, op, EventKind::Load)) {
                self.release(id);
                return Err(e);
            }
        }
        let s = self.storages.get_mut(&id).expect("registered above");
        if write && s.counted() {
            s.dirty = true;
            s.modified = true;
        }
        let device = s.device.as_ref().expect("loaded above").shallow_clone();
        let view = match s.loading.take().map_or(Ok(()), |t| t.block_compute(&device)).and_then(|()| Ok(native::view_on(&device, entry)?)) {
            Ok(view) => view,
            Err(e) => {
                self.release(id);
                return Err(e);
            }
        };
        if let Some(log) = &mut self.schedule {
            log.uses(id);
        }
        Ok(Acquired { view, storage: id, key, bytes, used_before })
    }

    fn load(&mut self, id: u64, op: &'static str, kind: EventKind) -> Result<()> {
        let started = Instant::now();
        let s = self.storages.get_mut(&id).expect("registered");
        debug_assert!(s.kind != Home::Lazy, "a storage without a home is always on the device");
        let (copy, transfer) = self.cfg.device.load(&s.home)?;
        s.device_id = native::storage(&copy, false)?.id;
        s.device = Some(copy);
        s.loading = Some(transfer);
        s.prefetched = kind == EventKind::Prefetch;
        let (bytes, pageable) = (s.bytes, s.kind.pageable());
        if pageable {
            self.stats.pageable_copies += 1;
            self.stats.pageable_copy_bytes += bytes;
        }
        self.stats.device_bytes += bytes;
        self.stats.peak_device_bytes = self.stats.peak_device_bytes.max(self.stats.device_bytes);
        if kind == EventKind::Prefetch {
            self.stats.prefetches += 1;
            self.stats.prefetch_bytes += bytes;
        }
        self.stats.loads += 1;
        self.stats.load_bytes += bytes;
        if let Some(log) = &mut self.schedule {
            log.load(id, bytes);
        }
        self.event(kind, id, bytes, op, Some(started));
        Ok(())
    }

    /// Evicts until `bytes` more fit in the budget, or says what the op needs.
    fn make_room(&mut self, bytes: u64, op: &'static str) -> Result<()> {
        if !self.policy.bounded() {
            return Ok(());
        }
        while self.stats.device_bytes + bytes > self.cfg.budget {
            let candidates = self.candidates();
            let Some(victim) = self.policy.pick_victim(&candidates, self.clock, &self.trace) else {
                let held: u64 = self.storages.values().filter(|s| s.resident() && s.counted() && (s.in_use > 0 || s.pinned)).map(|s| s.bytes).sum();
                return Err(Error::BudgetTooSmall { op: op.to_string(), needed: held + bytes, budget: self.cfg.budget });
            };
            self.evict(victim, op)?;
        }
        Ok(())
    }

    fn candidates(&self) -> Vec<Candidate> {
        self.storages
            .iter()
            .filter(|(_, s)| s.evictable())
            .map(|(&uid, s)| Candidate { uid, bytes: s.bytes, dirty: s.dirty, last_use: s.last_use, uses: s.uses, key: s.key })
            .collect()
    }

    /// Starts copying a newer device copy home (a home without memory gets page-locked memory
    /// first). The home may be read once the write-back has finished; memory the outside can
    /// reach is waited for before the running op returns.
    fn write_home(&mut self, id: u64, op: &'static str) -> Result<()> {
        let started = Instant::now();
        let cuda = self.cuda();
        let s = self.storages.get_mut(&id).expect("registered");
        let Some(device) = s.device.as_ref().filter(|_| s.dirty).map(tch::Tensor::shallow_clone) else { return Ok(()) };
        let mut new_memory = 0;
        if s.kind == Home::Lazy {
            new_memory = page_locked(cuda, || native::home_allocate(&s.home, cuda))?.1;
            s.kind = Home::PageLocked;
        }
        let transfer = Arc::new(self.cfg.device.write_back(&device, &s.home)?);
        if matches!(s.kind, Home::External { .. }) {
            self.owed.push(transfer.clone());
        }
        s.writing = Some(transfer);
        let (bytes, pageable, modified) = (s.bytes, s.kind.pageable(), s.modified);
        (s.dirty, s.modified) = (false, false);
        self.stats.count_page_locked(new_memory, bytes);
        if pageable {
            self.stats.pageable_copies += 1;
            self.stats.pageable_copy_bytes += bytes;
        }
        if !modified {
            self.stats.needless_write_backs += 1;
        }
        self.stats.write_backs += 1;
        self.stats.write_back_bytes += bytes;
        if let Some(log) = &mut self.schedule {
            log.write_back(bytes);
        }
        self.event(EventKind::WriteBack, id, bytes, op, Some(started));
        Ok(())
    }

    /// Drops the device copy, writing it home first if it is the newer one. On a failed
    /// write-back the copy stays where it was: nothing is lost.
    fn evict(&mut self, id: u64, op: &'static str) -> Result<()> {
        self.write_home(id, op)?;
        let s = self.storages.get_mut(&id).expect("victim is registered");
        drop(s.device.take().expect("victim is resident"));
        s.loading = None; // a prefetch never used: its memory belongs to the side stream
        s.prefetched = false;
        let bytes = s.bytes;
        self.stats.device_bytes -= bytes;
        self.stats.evictions += 1;
        self.stats.evicted_bytes += bytes;
        if let Some(log) = &mut self.schedule {
            log.evict(id);
        }
        self.event(EventKind::Evict, id, bytes, op, None);
        Ok(())
    }

    /// Ends a running op's use of a storage's device copy. Genoa drops it right away, and so is
    /// memory the outside can reach.
    pub(crate) fn release(&mut self, id: u64) {
        let Some(s) = self.storages.get_mut(&id) else { return };
        s.in_use = s.in_use.saturating_sub(1);
        let external = matches!(s.kind, Home::External { .. });
        if s.evictable() && (external || self.policy.drops_inputs_after_op()) {
            let _ = self.evict(id, "after op"); // a failed write-back keeps the copy
        }
    }

    /// Places an op's result computed on the device. A view of an input's storage becomes a new
    /// entry viewing the same storage (no bytes, nothing to write back). Anything else is a new
    /// storage: its working set is checked against the budget, room is made, and its entry's
    /// home is a host tensor without memory until the storage must leave the device.
    pub(crate) fn place_result(
        &mut self,
        result: tch::Tensor,
        op: &'static str,
        acquired: &[u64],
        inputs: &[(TraceKey, u64)],
        anchor: Option<u64>,
    ) -> Result<Entry> {
        let info = native::storage(&result, self.cuda())?;
        if let Some(&id) = acquired.iter().find(|id| self.storages.get(id).is_some_and(|s| s.resident() && s.device_id == info.id)) {
            let entry = Entry::new(native::view_on(&self.storages[&id].home, &result)?);
            self.end_op(op, inputs, None, anchor);
            self.attach(&entry, id);
            return Ok(entry);
        }
        let bytes = info.nbytes;
        if let Some(cap) = self.cfg.simulated_capacity.filter(|_| self.cfg.device == ComputeDevice::Simulated) {
            if self.stats.device_bytes + bytes > cap {
                return Err(Error::OutOfMemory(format!(
                    "simulated device: {bytes} bytes for the result of `{op}` do not fit ({} of {cap} in use)",
                    self.stats.device_bytes
                )));
            }
        }
        self.make_room(bytes, op)?;
        let home_view = native::lazy_home(&result)?;
        let home = native::storage_bytes(&home_view)?;
        let home_id = native::storage(&home_view, false)?.id;
        let device = native::storage_bytes(&result)?;
        let key = self.end_op(op, inputs, Some(bytes), anchor);
        let id = self.new_id();
        let mut s = Storage::new(home, Home::Lazy, bytes, key);
        (s.home_id, s.device_id, s.device, s.dirty, s.modified) = (home_id, info.id, Some(device), true, true);
        self.storages.insert(id, s);
        self.by_home.insert(home_id, id);
        self.stats.device_bytes += bytes;
        self.stats.peak_device_bytes = self.stats.peak_device_bytes.max(self.stats.device_bytes);
        let entry = Entry::new(home_view);
        self.attach(&entry, id);
        if let Some(log) = &mut self.schedule {
            log.made(id);
        }
        if !self.policy.keeps_results() {
            // Returning the entry even if the write-back failed: its copy then stays on the
            // device (nothing lost).
            let _ = self.evict(id, op);
        }
        Ok(entry)
    }

    /// Records the op in the trace and advances the clock; returns its result's trace key.
    pub(crate) fn end_op(&mut self, op: &'static str, inputs: &[(TraceKey, u64)], output: Option<u64>, anchor: Option<u64>) -> TraceKey {
        self.clock += 1;
        self.stats.ops += 1;
        if let Some(log) = &mut self.schedule {
            log.op(op, inputs, output);
        }
        self.trace.op_end(op, inputs, output, anchor)
    }

    /// After an op: events, prefetch, and memory homes moved out of. Returns the write-backs
    /// the op must wait for before it returns (memory shared with the outside).
    pub(crate) fn op_finished(&mut self, op: &'static str) -> Vec<Arc<Transfer>> {
        self.event(EventKind::OpEnd, 0, 0, op, None);
        if self.policy.prefetches() && self.cfg.prefetch_depth > 0 {
            self.prefetch();
        }
        self.free_retired();
        let owed = std::mem::take(&mut self.owed);
        self.stats.op_waits += owed.len() as u64;
        owed
    }

    /// Starts loading the storages the next recorded ops read, so the copy engine stays busy
    /// while the compute engine works. Free room in the budget is filled as far ahead as it
    /// goes; beyond it, a prefetch evicts only within a window of two and a half times the
    /// largest storage ahead (double buffering, one copy arriving while the next is being read,
    /// with slack for smaller storages read beside them), because every
    /// eviction further ahead would throw out a storage the recorded order keeps resident for
    /// the next iteration, and load it again. A storage is fetched only if it fits beside every
    /// op that runs before its use (see `Trace::prefetch_plan`); it evicts only clean copies
    /// needed later than itself (a speculative load never costs a write-back) and never another
    /// prefetch. Errors stop the prefetch; the op then loads what it needs.
    fn prefetch(&mut self) {
        let room = self.cfg.budget.saturating_sub(self.stats.pinned_bytes);
        let plan = self.trace.prefetch_plan(self.cfg.prefetch_depth);
        let window = 5 * plan.iter().filter_map(|(id, _)| self.storages.get(id)).map(|s| s.bytes).max().unwrap_or(0) / 2;
        let (mut committed, mut ahead) = (0, 0);
        for (id, before) in plan {
            let Some(s) = self.storages.get(&id) else { continue };
            if s.pinned || !s.counted() || matches!(s.kind, Home::External { .. }) {
                continue;
            }
            let (bytes, wanted) = (s.bytes, self.trace.next_use(s.key));
            if s.resident() {
                ahead += if s.prefetched { bytes } else { 0 };
                continue;
            }
            let fits_free = self.stats.device_bytes + bytes <= self.cfg.budget;
            if committed + bytes + before > room || (!fits_free && ahead + bytes > window) {
                return;
            }
            while self.stats.device_bytes + bytes > self.cfg.budget {
                let later = self
                    .candidates()
                    .into_iter()
                    .filter(|c| !c.dirty && !self.storages[&c.uid].prefetched && self.trace.next_use(c.key) > wanted)
                    .collect::<Vec<_>>();
                match self.policy.pick_victim(&later, self.clock, &self.trace) {
                    Some(victim) if self.evict(victim, "prefetch").is_ok() => {}
                    _ => return,
                }
            }
            if self.load(id, "prefetch", EventKind::Prefetch).is_err() {
                return;
            }
            committed += bytes;
            ahead += bytes;
        }
    }

    /// Evicts every device copy no running op uses (out-of-memory recovery). Returns the count.
    pub(crate) fn evict_unused(&mut self) -> usize {
        let victims: Vec<u64> = self.candidates().iter().map(|c| c.uid).collect();
        victims.iter().filter(|&&id| self.evict(id, "out-of-memory recovery").is_ok()).count()
    }

    pub(crate) fn take_owed(&mut self) -> Vec<Arc<Transfer>> {
        std::mem::take(&mut self.owed)
    }

    pub(crate) fn mark_iteration(&mut self) {
        self.trace.mark();
        if let Some(log) = &mut self.schedule {
            log.mark();
        }
    }

    pub(crate) fn start_schedule_log(&mut self) {
        self.schedule = Some(Log::default());
    }

    pub(crate) fn schedule_log(&self) -> Option<super::schedule::Pass> {
        self.schedule.as_ref().and_then(|l| l.last_pass().cloned())
    }

    // ------------------------------------------------------------ outside ops

    pub(crate) fn is_resident(&self, entry: &Entry) -> Result<bool> {
        Ok(self.find(entry)?.is_some_and(|id| self.storages[&id].resident()))
    }

    /// What a read of `entry` should read: its view of the device copy if that is newer, else
    /// its home, with the write-back still copying into it (to wait for outside the lock).
    pub(crate) fn readable(&mut self, entry: &Entry) -> Result<(tch::Tensor, Option<Arc<Transfer>>)> {
        let Some(id) = self.find(entry)? else { return Ok((entry.shallow_clone(), None)) };
        let s = self.storages.get_mut(&id).expect("found");
        match (&s.device, s.dirty) {
            (Some(device), true) => Ok((native::view_on(device, entry)?, None)),
            _ => Ok((entry.shallow_clone(), s.pending_write())),
        }
    }

    /// Before `entry`'s home is shared outside: its storage becomes external (its home memory is
    /// marked so; see `Home::External`), a newer device copy is written home and the device copy
    /// dropped unless an op uses it. Returns the write-back to wait for.
    pub(crate) fn settle_home(&mut self, entry: &Entry) -> Result<Vec<Arc<Transfer>>> {
        let id = self.storage_of(entry)?;
        if self.storages[&id].evictable() {
            self.evict(id, "export")?;
        } else {
            self.write_home(id, "export")?;
        }
        self.owed.clear();
        let s = self.storages.get_mut(&id).expect("registered");
        native::mark_external(&s.home)?;
        if let Home::PageLocked | Home::Pageable = s.kind {
            s.kind = Home::External { page_locked: s.kind == Home::PageLocked };
        }
        Ok(s.pending_write().into_iter().collect())
    }

    /// Called when a registered entry dies. The storage is forgotten with its last view, unless
    /// other tensors still hold its home (views made before the manager saw it): then it stays
    /// known, so they keep reading current data through the manager.
    pub(crate) fn forget(&mut self, uid: u64) {
        let Some(id) = self.entries.remove(&uid) else { return };
        let Some(s) = self.storages.get_mut(&id) else { return };
        s.views -= 1;
        if s.views > 0 {
            return;
        }
        // The dying entry's tensor and `home` hold two references.
        let others = native::storage(&s.home, false).map_or(0, |i| i.holders) > 2;
        if others && s.kind != Home::Lazy {
            return;
        }
        let s = self.storages.remove(&id).expect("found above");
        self.by_home.remove(&s.home_id);
        if s.resident() && s.counted() {
            self.stats.device_bytes -= s.bytes;
        }
        if s.pinned {
            self.stats.pinned_bytes -= s.bytes;
        }
    }

    /// Pins (or unpins) an entry's storage: loaded now, never evicted, counted against the
    /// budget. Pinned bytes alone may not exceed the budget.
    pub(crate) fn pin(&mut self, entry: &Entry, pinned: bool) -> Result<()> {
        let id = self.storage_of(entry)?;
        let s = &self.storages[&id];
        let (bytes, was_pinned, resident) = (s.bytes, s.pinned, s.resident());
        if was_pinned == pinned {
            return Ok(());
        }
        if !pinned {
            self.storages.get_mut(&id).expect("registered").pinned = false;
            self.stats.pinned_bytes -= bytes;
            return Ok(());
        }
        if self.policy.bounded() && self.stats.pinned_bytes + bytes > self.cfg.budget {
            return Err(Error::BudgetTooSmall { op: "pin_resident".into(), needed: self.stats.pinned_bytes + bytes, budget: self.cfg.budget });
        }
        if !resident {
            self.make_room(bytes, "pin_resident")?;
            self.load(id, "pin_resident", EventKind::Load)?;
        }
        self.storages.get_mut(&id).expect("registered").pinned = true;
        self.stats.pinned_bytes += bytes;
        Ok(())
    }

    /// Starts writing every newer device copy home and drops every device copy (before
    /// reconfiguring). Returns the write-backs to wait for once the lock is released.
    pub(crate) fn drain(&mut self) -> Result<Vec<Arc<Transfer>>> {
        let ids: Vec<u64> = self.storages.iter().filter(|(_, s)| s.resident() && s.counted()).map(|(&id, _)| id).collect();
        for id in ids {
            self.storages.get_mut(&id).expect("listed").pinned = false;
            self.evict(id, "drain")?;
        }
        self.stats.pinned_bytes = 0;
        self.owed.clear();
        self.free_retired();
        Ok(self.storages.values_mut().filter_map(Storage::pending_write).collect())
    }
}

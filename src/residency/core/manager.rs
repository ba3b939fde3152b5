//! The manager's state and its moves, over storages (see `storage`): loads, evictions (a clean
//! copy is dropped for free, a newer one is written back asynchronously), result placement (a
//! view of an input shares its storage; a new storage gets a home without memory until it must
//! leave the device). Making room is in `eviction`, registering and forgetting storages in
//! `homes`, what reaches the manager outside ops (reads, exports, pins, the drain) in `outside`;
//! Flow's loads ahead of use and write-ahead are in `policy::flow`.
//!
//! One manager per process behind one mutex (`residency::MANAGER`). Copies are started while it
//! is held, so the accounting is exact at every event. The host waits on the GPU under it only
//! where the budget needs memory the device is still using (`device::freeing`); the waits a
//! caller owes (a read of a home still being written, memory shared with the outside) are handed
//! back and waited for after the lock is released. The policy only chooses victims and sets the
//! rules.

use crate::residency::device::{Device, Transfer};
use crate::residency::device::memory;
use crate::residency::device::faults::Fault;
use crate::residency::core::id_map::IdMap;
use crate::residency::policy::Rules;
use crate::residency::training::recipe::{LinkLoad, Recipe, Recompute};
use crate::residency::core::report::{Event, EventKind, Reporter, ResidencyStats};
use crate::residency::model::{Log, Rates};
use crate::residency::core::storage::{ByRole, Home, Role, Storage};
use crate::residency::core::storage_table::StorageTable;
use crate::residency::policy::flow::trace::{Trace, TraceKey};
use crate::residency::torch_storage::StorageRef;
use crate::residency::Config;
use crate::error::{Error, Result};
use crate::registry::Entry;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

thread_local! {
    /// The storages the op running on this thread holds (`acquire` to `release`): what it needs
    /// by itself, told apart from what ops on other threads hold (`make_room`). An op runs on one
    /// thread, and a remake inside it on the same.
    pub(in crate::residency) static HOLDS: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
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
    pub(in crate::residency) policy: Box<dyn Rules>,
    pub(in crate::residency) storages: StorageTable,
    /// Home StorageImpl address -> storage.
    pub(in crate::residency) by_home: IdMap<usize, u64>,
    /// Device copy StorageImpl address -> storage, for the storages on the device (how an op's
    /// result or a tensor autograd saves is recognised as a view of a known storage).
    pub(in crate::residency) by_device: IdMap<usize, u64>,
    /// Trace key -> storage, for the storages results and saved tensors made (how Flow finds
    /// what to prefetch in backward); kept under a policy that prefetches only, for those made
    /// while an iteration is followed.
    pub(in crate::residency) by_key: IdMap<TraceKey, u64>,
    /// Storage -> the storages whose recipes read it (see `recompute`).
    pub(in crate::residency) dependents: IdMap<u64, Vec<u64>>,
    /// Storages whose registered views have all died while other tensors still held their home:
    /// forgotten once those are gone too (see `forget`).
    pub(in crate::residency) orphans: Vec<u64>,
    /// Entries forgotten since the orphans were last checked (see `forget`).
    pub(in crate::residency) forgotten: usize,
    /// Write-backs of external memory the running op must wait for before it returns.
    pub(in crate::residency) owed: Vec<Arc<Transfer>>,
    /// Storages the running op made or wrote (see `write_ahead`).
    pub(in crate::residency) written_now: Vec<u64>,
    /// The trace key given to the last storage made from nothing, and its id (see `name_fresh`).
    pub(in crate::residency) fresh_named: Option<(TraceKey, u64)>,
    /// Storages whose write-ahead waits for the op that writes them next (see `write_ahead`).
    pub(in crate::residency) write_ahead_later: Vec<u64>,
    /// Results a policy that keeps none lets go of as their op finishes (see `add_produced`).
    pub(in crate::residency) unkept: Vec<u64>,
    /// Flow's prefetch after the last op, made as the next op begins (`op_begin`).
    prefetch_due: bool,
    /// Counts the storages that left the device or came new to the manager: what a finished
    /// prefetch pass (`window_done`) no longer holds for once it moves.
    pub(in crate::residency) window_epoch: u64,
    /// Where Flow's last prefetch pass that went through its whole window began (see `prefetch`).
    pub(in crate::residency) window_done: Option<crate::residency::policy::flow::trace::WindowDone>,
    /// Flow's prefetch plan: the storages a pass walks, with what must fit beside each. Kept
    /// for its memory, so that a pass allocates nothing; each pass fills it anew.
    pub(in crate::residency) prefetch_plan: Vec<(u64, crate::residency::policy::flow::trace::Ahead)>,
    pub(crate) stats: ResidencyStats,
    /// `stats.device_bytes` by what the storages hold, for the memory picture.
    pub(in crate::residency) device_by_role: ByRole,
    pub(in crate::residency) clock: u64,
    pub(crate) trace: Trace,
    pub(crate) report: Reporter,
    /// A log of each iteration for the schedule model: kept under `Cheaper` (which weighs copies
    /// by it) or when asked for.
    pub(crate) schedule: Option<Log>,
    pub(in crate::residency) link: LinkLoad,
    /// The compute stream's timed waits for copies not yet passed, in the order it meets them
    /// (CUDA; see `count_stalls`).
    stalls: VecDeque<crate::residency::device::cuda::Stall>,
    /// Device copies let go of that the device may still be using (see `device::freeing`).
    pub(in crate::residency) freeing: crate::residency::device::freeing::Freeing,
    /// Room made for the outputs of running ops before their kernels run, counted against the
    /// budget until they are placed; and, while an op places them, what is left of its own
    /// (see `outputs`).
    pub(in crate::residency) reserved: u64,
    pub(in crate::residency) reservation: u64,
    /// What `Recompute::Cheaper` prices with: the configuration's rates, which `configure` fills
    /// with the device's under `Cheaper` (the one mode that prices, so no other start measures a
    /// device); the preset where none is set, which then prices nothing.
    pub(in crate::residency) rates: Rates,
}

impl Manager {
    pub(crate) fn new(cfg: Config) -> Result<Manager> {
        cfg.device.check_available()?;
        let policy = cfg.policy.rules();
        if policy.bounded() && cfg.budget_bytes == 0 {
            return Err(Error::InvalidArg(format!("{:?} needs a device budget above 0 bytes", cfg.policy)));
        }
        let stats = ResidencyStats { budget: if policy.bounded() { cfg.budget_bytes } else { u64::MAX }, ..Default::default() };
        let rates = cfg.rates.unwrap_or(Rates::H100);
        let schedule = (cfg.recompute == Recompute::Cheaper && cfg.device != Device::Cpu).then(Log::default);
        Ok(Manager {
            cfg,
            policy,
            storages: StorageTable::default(),
            by_home: IdMap::default(),
            by_device: IdMap::default(),
            by_key: IdMap::default(),
            dependents: IdMap::default(),
            orphans: Vec::new(),
            forgotten: 0,
            owed: Vec::new(),
            written_now: Vec::new(),
            write_ahead_later: Vec::new(),
            fresh_named: None,
            unkept: Vec::new(),
            prefetch_due: false,
            window_epoch: 0,
            window_done: None,
            prefetch_plan: Vec::new(),
            stats,
            device_by_role: ByRole::default(),
            clock: 0,
            trace: Trace::default(),
            report: Reporter::new(),
            schedule,
            link: LinkLoad::default(),
            stalls: VecDeque::new(),
            freeing: Default::default(),
            reserved: 0,
            reservation: 0,
            rates,
        })
    }

    /// Whether anything moves: on the CPU the manager only counts ops.
    pub(crate) fn moves(&self) -> bool {
        self.cfg.device != Device::Cpu
    }

    pub(in crate::residency) fn cuda(&self) -> bool {
        self.cfg.device.cuda()
    }

    pub(in crate::residency) fn event(&mut self, kind: EventKind, storage: u64, bytes: u64, op: &'static str, started: Option<Instant>) {
        let waited = started.map(|s| s.elapsed());
        if let Some(w) = waited {
            self.stats.transfer_wait_ns += w.as_nanos() as u64;
        }
        if !self.report.listened() {
            return;
        }
        let duration_us = waited.map_or(0.0, |w| w.as_secs_f64() * 1e6);
        let time_us = self.report.now_us();
        let device_bytes = self.stats.device_bytes;
        self.report.emit(Event { kind, entry: storage, bytes, device_bytes, op, time_us, duration_us }, self.device_by_role);
    }

    /// Before an op: the prefetch the previous op left due (made now, once that op's inputs are
    /// let go, so that evicting them frees their memory), then its event.
    pub(crate) fn op_begin(&mut self, op: &'static str) {
        if std::mem::take(&mut self.prefetch_due) {
            self.prefetch();
        }
        self.event(EventKind::OpBegin, 0, 0, op, None);
    }

    /// The device copy of `entry`'s storage for a running op, loaded if needed (making room
    /// first), as `entry`'s view of it. The storage is in use until `release`. With `write`,
    /// the device copy becomes the newer one.
    pub(crate) fn acquire(&mut self, entry: &Entry, write: bool, op: &'static str) -> Result<Acquired> {
        self.acquire_as(entry, entry, write, op)
    }

    /// `acquire`, viewed as `like` (a tensor over the same storage as `entry`, with its own
    /// dtype, sizes, strides and offset).
    pub(crate) fn acquire_as(&mut self, entry: &Entry, like: &tch::Tensor, write: bool, op: &'static str) -> Result<Acquired> {
        let id = self.storage_of(entry)?;
        self.hold(id, write, op)?;
        let s = &self.storages[&id];
        let view = match crate::residency::torch_storage::device_view(s.device.as_ref().expect("held on the device"), like) {
            Ok(view) => view,
            Err(e) => {
                self.release(id, false);
                return Err(e.into());
            }
        };
        let (bytes, key, used_before) = (s.bytes, s.key, s.uses > 1);
        if let Some(log) = &mut self.schedule {
            log.uses(id, view.size());
        }
        Ok(Acquired { view, storage: id, key, bytes, used_before })
    }

    /// Fetches into the cache the device copies' StorageImpls that acquiring `entries` reads.
    pub(in crate::residency) fn fetch_device_copies<'a>(&self, entries: impl Iterator<Item = &'a Entry>) {
        for e in entries {
            if let Some(copy) = self.storages.get(&e.storage()).and_then(|s| s.device.as_ref()) {
                crate::residency::cache_lines::storage(copy.id());
            }
        }
    }

    /// Holds storage `id`'s device copy for a running op (see `acquire`), loading it if needed.
    /// External memory inside another external storage's bytes views that one's copy, which is
    /// held as long (`external`).
    fn hold(&mut self, id: u64, write: bool, op: &'static str) -> Result<()> {
        let s = &self.storages[&id];
        let outer = match (s.within, s.resident()) {
            (Some(outer), _) => Some((outer, 0)), // a view of it already: held once more
            (None, false) => self.outer_memory(id),
            (None, true) => None,
        };
        if let Some((outer, _)) = outer {
            self.hold(outer, write, op)?; // its copy is reached through `alias_within`
        }
        let (clock, following) = (self.clock, self.trace.following() && self.policy.prefetches());
        HOLDS.with(|h| h.borrow_mut().push(id));
        let s = self.storages.get_mut(&id).expect("registered");
        s.in_use += 1;
        s.last_use = clock;
        s.uses += 1;
        if s.resident() {
            if std::mem::take(&mut s.prefetched) {
                self.stats.prefetch_hits += 1;
            }
        } else {
            if following && !s.fresh {
                self.stats.prefetch_misses += 1; // (a storage never written has nothing to fetch)
            }
            let brought = match outer {
                Some((outer, offset)) => self.alias_within(id, outer, offset),
                None => self.no_copy_inside(id, op).and_then(|()| self.bring(id, op, EventKind::Load)),
            };
            if let Err(e) = brought {
                self.release(id, false);
                return Err(e);
            }
        }
        if write {
            if let Err(e) = self.before_write(id, op) {
                self.release(id, false);
                return Err(e);
            }
        }
        let s = self.storages.get_mut(&id).expect("registered");
        if write && s.counted() {
            s.dirty = true;
            s.modified = true;
            self.written_now.push(id);
        }
        let Some(loading) = s.loading.take() else { return Ok(()) };
        s.read_on_compute = true;
        let waited = s.device.as_ref().expect("loaded above").bytes().map_err(Error::from).and_then(|copy| loading.block_compute(&copy));
        match waited {
            Ok(stall) => {
                self.stalls.extend(stall);
                Ok(())
            }
            Err(e) => {
                self.release(id, false);
                Err(e)
            }
        }
    }

    pub(in crate::residency) fn load(&mut self, id: u64, op: &'static str, kind: EventKind) -> Result<()> {
        let started = Instant::now();
        let s = self.storages.get_mut(&id).expect("registered");
        debug_assert!(s.kind != Home::Lazy, "a storage without a home is always on the device");
        let after_write = s.pending_write().is_some();
        let home = s.home.bytes()?;
        let (copy, transfer) = self.cfg.device.load(&home, after_write)?;
        crate::residency::autograd::share_version(&copy, &home)?;
        let copy = StorageRef::of(&copy)?;
        self.by_device.insert(copy.id(), id);
        s.device = Some(copy);
        s.fresh = false; // what the home holds is on the device now, written or not
        s.loading = Some(transfer);
        (s.read_on_compute, s.written_home) = (false, false);
        s.prefetched = kind == EventKind::Prefetch;
        let (bytes, pageable, role) = (s.bytes, s.kind.pageable(), s.role);
        if pageable {
            self.stats.pageable_copies += 1;
            self.stats.pageable_copy_bytes += bytes;
        }
        self.stats.device_bytes += bytes;
        self.device_by_role.add(role, bytes);
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
        if kind == EventKind::Load && !self.cuda() {
            // A copy made when an op needs it, before the op: the op waits for all of it.
            self.stats.load_wait_ns += started.elapsed().as_nanos() as u64;
        }
        self.event(kind, id, bytes, op, Some(started));
        Ok(())
    }

    /// Gives a storage never written (`Storage::fresh`) memory on the device, where its data
    /// will be from now on: nothing to load, and its home is out of date.
    pub(in crate::residency) fn allocate(&mut self, id: u64, op: &'static str) -> Result<()> {
        let s = self.storages.get_mut(&id).expect("registered");
        let memory = self.cfg.device.allocate(s.bytes, op)?;
        crate::residency::autograd::share_version(&memory, &s.home.bytes()?)?;
        let memory = StorageRef::of(&memory)?;
        self.by_device.insert(memory.id(), id);
        s.device = Some(memory);
        (s.read_on_compute, s.written_home) = (false, false);
        (s.fresh, s.dirty, s.modified) = (false, true, true);
        let (bytes, role) = (s.bytes, s.role);
        self.stats.device_bytes += bytes;
        self.device_by_role.add(role, bytes);
        self.stats.peak_device_bytes = self.stats.peak_device_bytes.max(self.stats.device_bytes);
        if let Some(log) = &mut self.schedule {
            log.made(id);
        }
        Ok(())
    }

    /// Adds the compute stream's waits for copies that it has passed to `load_wait_ns`: one
    /// stream meets them in order, so the first it has not passed ends the count.
    pub(crate) fn count_stalls(&mut self) {
        while let Some(ns) = self.stalls.front().and_then(crate::residency::device::cuda::Stall::ns) {
            self.stats.load_wait_ns += ns;
            self.stalls.pop_front();
        }
    }

    /// Ends a running op's use of a storage's device copy. Memory the outside can reach leaves
    /// the device at once, and under Genoa so does every input of an op that `ended` (not one
    /// that gave up, to run again: its inputs stay for that, free to evict).
    pub(crate) fn release(&mut self, id: u64, ended: bool) {
        HOLDS.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&held| held == id) {
                h.swap_remove(i);
            }
        });
        crate::residency::core::room::freed();
        let Some(s) = self.storages.get_mut(&id) else { return };
        s.in_use = s.in_use.saturating_sub(1);
        if let Some(outer) = s.within {
            self.end_alias(id);
            return self.release(outer, ended);
        }
        let external = matches!(s.kind, Home::External { .. });
        // `evictable` last: it asks libtorch whether the memory is held elsewhere.
        if (external || (ended && self.policy.drops_inputs_after_op())) && s.evictable() {
            let _ = self.evict(id, "after op"); // a failed write-back keeps the copy
        }
    }

    /// Places an op's result computed on the device. A view of a storage on the device (an
    /// input's, or one autograd saved during the op) becomes a new entry viewing that storage (no
    /// bytes, nothing to write back). Anything else is a new storage (`add_produced`), which keeps
    /// `recipe` if one is given.
    pub(crate) fn place_result(&mut self, result: &tch::Tensor, op: &'static str, inputs: &[(TraceKey, u64)], anchor: Option<u64>, recipe: Option<Recipe>) -> Result<Entry> {
        let info = crate::residency::torch_storage::storage(result, self.cuda())?;
        if let Some(&id) = self.by_device.get(&info.id) {
            let entry = Entry::new(self.storages[&id].home.view(result)?);
            self.end_op(op, inputs, None, anchor);
            self.attach(&entry, id);
            return Ok(entry);
        }
        self.add_produced(result, &info, op, inputs, anchor, recipe, Role::Activations)
    }

    /// Registers a tensor made on the device (an op's result, a gradient, or one autograd saved:
    /// `role`) as a new storage, recording `op` in the trace: its working set is checked against
    /// the budget, room is made, and its entry's home is a host tensor without memory until the
    /// storage must leave the device.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::residency) fn add_produced(
        &mut self,
        t: &tch::Tensor,
        info: &crate::residency::torch_storage::StorageInfo,
        op: &'static str,
        inputs: &[(TraceKey, u64)],
        anchor: Option<u64>,
        recipe: Option<Recipe>,
        role: Role,
    ) -> Result<Entry> {
        let bytes = info.nbytes;
        if self.cfg.device == Device::Simulated {
            memory::adopt(t); // counted from here on as a storage's
        }
        self.cfg.device.fault(Fault::DeviceAllocation, format_args!("allocating the result of `{op}`"))?;
        if let Some(cap) = self.cfg.simulated_capacity.filter(|_| self.cfg.device == Device::Simulated) {
            if self.stats.device_bytes + bytes > cap {
                return Err(Error::OutOfMemory(format!(
                    "simulated device: {bytes} bytes for the result of `{op}` do not fit ({} of {cap} in use)",
                    self.stats.device_bytes
                )));
            }
        }
        self.draw_reservation(bytes);
        self.make_room(bytes, op)?;
        let crate::residency::torch_storage::ResultHome { home: home_view, home_ref, device_ref } =
            crate::residency::torch_storage::result_home(t)?;
        let key = self.end_op(op, inputs, Some(bytes), anchor);
        self.unname_fresh(key);
        let home_id = home_ref.id();
        let mut s = Storage::new(home_ref, Home::Lazy, bytes, key);
        (s.device, s.dirty, s.modified, s.role) = (Some(device_ref), true, true, role);
        s.last_use = self.clock;
        let id = self.storages.insert(|_| s)?;
        self.written_now.push(id);
        self.by_home.insert(home_id, id);
        self.by_device.insert(info.id, id);
        // Only prefetch looks results up by their trace key, and only those of the iteration it
        // follows: a result made while none is followed is never looked up.
        if self.policy.prefetches() && self.trace.following() {
            self.by_key.insert(key, id);
        }
        self.stats.device_bytes += bytes;
        self.device_by_role.add(role, bytes);
        self.stats.peak_device_bytes = self.stats.peak_device_bytes.max(self.stats.device_bytes);
        let entry = Entry::recycled(home_view); // its TensorImpl the manager's (see `op_views`)
        self.attach(&entry, id);
        if let Some(log) = &mut self.schedule {
            log.made(id);
        }
        if let Some(recipe) = recipe {
            self.keep_recipe(id, op, recipe)?;
        }
        if !self.policy.keeps_results() {
            // Evicted as the op finishes: until then the op holds the memory (a tensor autograd
            // saved, still read by the kernel), and evicting it would free nothing.
            self.unkept.push(id);
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
        let iteration = self.trace.iteration();
        let key = self.trace.op_end(op, inputs, output, anchor);
        if self.policy.prefetches() {
            // (Another thread's op may have written one that is gone since.)
            for s in self.written_now.iter().filter_map(|id| self.storages.get(id)) {
                self.trace.wrote(s.key);
            }
        }
        if self.trace.iteration() != iteration {
            // A boundary Flow found by itself, at this op, the new iteration's first: the log's
            // pass ends after it, one iteration's ops turned by one, the same on every pass.
            self.report.iteration();
            self.persist_survivors();
            if let Some(log) = &mut self.schedule {
                log.mark();
            }
        }
        key
    }

    /// After an op: the results a policy keeps none of leave (those another running op still
    /// holds, later), events, write-ahead, the prefetch due before the next op, and memory homes
    /// moved out of. Returns the write-backs the op must wait for before it returns (memory
    /// shared with the outside).
    pub(crate) fn op_finished(&mut self, op: &'static str) -> Vec<Arc<Transfer>> {
        self.evict_unkept(op);
        self.event(EventKind::OpEnd, 0, 0, op, None);
        self.write_ahead(op);
        self.prefetch_due = self.policy.prefetches() && self.cfg.prefetch_depth > 0;
        self.free_retired();
        let owed = std::mem::take(&mut self.owed);
        self.stats.write_through_waits += owed.len() as u64;
        self.count_stalls();
        owed
    }

    pub(crate) fn take_owed(&mut self) -> Vec<Arc<Transfer>> {
        std::mem::take(&mut self.owed)
    }

    pub(crate) fn mark_iteration(&mut self) {
        self.trace.mark();
        self.report.iteration();
        self.persist_survivors();
        if let Some(log) = &mut self.schedule {
            log.mark();
        }
        if self.cfg.recompute == Recompute::Cheaper {
            self.weigh_link();
        }
    }

    /// Results that outlive the iteration that made them (parameters made by ops, gradients,
    /// optimizer state, a cache) are named by their own id from the next iteration on, as
    /// tensors made before the first are: the trace records their uses, and Flow sees when they
    /// are needed again (a result's key from a past iteration reads as never used again, so it
    /// would be evicted first, and never prefetched). At every boundary, marked or found: at a
    /// found one, the ops that read them gain anchors, which recur once an iteration as the
    /// others do (an anchor is signed by its op and how the op reads them: `Ticket::anchor`).
    fn persist_survivors(&mut self) {
        let iteration = self.trace.iteration();
        let mut survived = Vec::new();
        for (&id, s) in self.storages.iter_mut() {
            if let TraceKey::Produced { iteration: made, op } = s.key {
                if made + 1 == iteration {
                    survived.push((id, op));
                }
                if made < iteration {
                    self.by_key.remove(&s.key);
                    s.key = TraceKey::Persistent(id);
                    if s.role == Role::Activations {
                        s.role = Role::State;
                        if s.resident() && s.counted() {
                            self.device_by_role.sub(Role::Activations, s.bytes);
                            self.device_by_role.add(Role::State, s.bytes);
                        }
                    }
                }
            }
        }
        let storages = &self.storages;
        self.trace.survived(survived, |id| storages.contains_key(&id));
    }

    pub(crate) fn start_schedule_log(&mut self) {
        self.schedule.get_or_insert_with(Log::default);
    }

    pub(crate) fn schedule_log(&self) -> Option<crate::residency::model::Pass> {
        self.schedule.as_ref().and_then(|l| l.last_pass().cloned())
    }

}

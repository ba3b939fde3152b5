//! The manager's state and its moves: where each registered entry's bytes live, loads, evictions
//! (clean copies dropped for free, dirty ones written back first), result placement, prefetch.
//! One manager per process behind one mutex (`super::MANAGER`); copies run while it is held, so
//! the accounting is exact at every event. The policy only chooses victims and sets the rules.

use super::cuda::{self, Pending};
use super::device::ComputeDevice;
use super::policy::{self, Candidate, Policy};
use super::report::{Event, EventKind, Reporter, ResidencyStats};
use super::trace::{Trace, TraceKey};
use super::Config;
use crate::error::{Error, Result};
use crate::registry::{footprint, Entry};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Where one entry's bytes live.
struct Residence {
    /// Shares storage with the entry's home tensor (host memory).
    home: tch::Tensor,
    device: Option<tch::Tensor>,
    /// The device copy is newer than the home copy.
    dirty: bool,
    bytes: u64,
    last_use: u64,
    uses: u64,
    /// Running ops using the device copy; such a copy is never evicted.
    in_use: u32,
    pinned: bool,
    /// Brought by a prefetch and not used since.
    prefetched: bool,
    /// A CUDA copy into `device` still in flight on the side stream.
    pending: Option<Pending>,
    key: TraceKey,
}

pub(crate) struct Manager {
    pub(crate) cfg: Config,
    policy: Box<dyn Policy>,
    map: HashMap<u64, Residence>,
    pub(crate) stats: ResidencyStats,
    clock: u64,
    pub(crate) trace: Trace,
    pub(crate) report: Reporter,
}

impl Manager {
    pub(crate) fn new(cfg: Config) -> Result<Manager> {
        cfg.device.check_available()?;
        let policy = policy::make(cfg.policy);
        if policy.bounded() && cfg.budget == 0 {
            return Err(Error::InvalidArg(format!("{:?} needs a device budget above 0 bytes", cfg.policy)));
        }
        let stats = ResidencyStats { budget: if policy.bounded() { cfg.budget } else { u64::MAX }, ..Default::default() };
        Ok(Manager { cfg, policy, map: HashMap::new(), stats, clock: 0, trace: Trace::default(), report: Reporter::new() })
    }

    /// Whether anything moves: on the CPU the manager only counts ops.
    pub(crate) fn moves(&self) -> bool {
        self.cfg.device != ComputeDevice::Cpu
    }

    fn register(&mut self, entry: &Entry) -> &mut Residence {
        let key = TraceKey::Persistent(entry.uid());
        entry.registered.store(true, Ordering::Release);
        self.map.entry(entry.uid()).or_insert_with(|| Residence {
            home: entry.shallow_clone(),
            device: None,
            dirty: false,
            bytes: entry.bytes(),
            last_use: 0,
            uses: 0,
            in_use: 0,
            pinned: false,
            prefetched: false,
            pending: None,
            key,
        })
    }

    fn event(&mut self, kind: EventKind, entry: u64, bytes: u64, op: &'static str, started: Option<Instant>) {
        let duration_us = started.map_or(0.0, |s| s.elapsed().as_secs_f64() * 1e6);
        if let Some(s) = started {
            self.stats.transfer_wait_ns += s.elapsed().as_nanos() as u64;
        }
        let time_us = self.report.now_us();
        let device_bytes = self.stats.device_bytes;
        self.report.emit(Event { kind, entry, bytes, device_bytes, op, time_us, duration_us });
    }

    pub(crate) fn op_begin(&mut self, op: &'static str) {
        self.event(EventKind::OpBegin, 0, 0, op, None);
    }

    /// The device copy of `entry` for a running op, loaded if needed (making room first), its
    /// trace key, and whether an earlier op used it. The copy is marked in use until `release`.
    /// With `write`, the device copy becomes the newer one.
    pub(crate) fn acquire(&mut self, entry: &Entry, write: bool, op: &'static str) -> Result<(tch::Tensor, TraceKey, bool)> {
        let clock = self.clock;
        let r = self.register(entry);
        let used_before = r.uses > 0;
        r.in_use += 1;
        r.last_use = clock;
        r.uses += 1;
        let (uid, bytes, key) = (entry.uid(), r.bytes, r.key);
        if r.device.is_some() {
            if std::mem::take(&mut r.prefetched) {
                self.stats.prefetch_hits += 1;
            }
        } else {
            if self.trace.following() && self.policy.prefetches() {
                self.stats.prefetch_misses += 1;
            }
            if let Err(e) = self.make_room(bytes, op).and_then(|()| self.load(uid, op, EventKind::Load)) {
                self.release(uid);
                return Err(e);
            }
        }
        let r = self.map.get_mut(&uid).expect("registered above");
        r.dirty |= write;
        let device = r.device.as_ref().expect("loaded above").shallow_clone();
        if let Some(copy) = r.pending.take() {
            let started = Instant::now();
            let waited = cuda::wait(copy, &device);
            self.stats.transfer_wait_ns += started.elapsed().as_nanos() as u64;
            if let Err(e) = waited {
                self.release(uid);
                return Err(e);
            }
        }
        Ok((device, key, used_before))
    }

    fn load(&mut self, uid: u64, op: &'static str, kind: EventKind) -> Result<()> {
        let started = Instant::now();
        let r = self.map.get_mut(&uid).expect("registered");
        let (copy, pending) = self.cfg.device.load(&r.home)?;
        (r.device, r.pending) = (Some(copy), pending);
        let bytes = r.bytes;
        self.stats.device_bytes += bytes;
        self.stats.peak_device_bytes = self.stats.peak_device_bytes.max(self.stats.device_bytes);
        if kind == EventKind::Prefetch {
            r.prefetched = true;
            self.stats.prefetches += 1;
            self.stats.prefetch_bytes += bytes;
        }
        self.stats.loads += 1;
        self.stats.load_bytes += bytes;
        self.event(kind, uid, bytes, op, Some(started));
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
                let held: u64 = self.map.values().filter(|r| r.device.is_some() && (r.in_use > 0 || r.pinned)).map(|r| r.bytes).sum();
                return Err(Error::BudgetTooSmall { op: op.to_string(), needed: held + bytes, budget: self.cfg.budget });
            };
            self.evict(victim, op)?;
        }
        Ok(())
    }

    fn candidates(&self) -> Vec<Candidate> {
        self.map
            .iter()
            .filter(|(_, r)| r.device.is_some() && r.in_use == 0 && !r.pinned)
            .map(|(&uid, r)| Candidate { uid, bytes: r.bytes, dirty: r.dirty, last_use: r.last_use, uses: r.uses, key: r.key })
            .collect()
    }

    /// Drops the device copy, writing it back first if it is the newer one.
    fn evict(&mut self, uid: u64, op: &'static str) -> Result<()> {
        let r = self.map.get_mut(&uid).expect("victim is registered");
        let device = r.device.take().expect("victim is resident");
        r.pending = None; // a prefetch never used: its memory belongs to the side stream
        let bytes = r.bytes;
        if r.dirty {
            let started = Instant::now();
            let written = self.cfg.device.write_back(&device, &r.home);
            if let Err(e) = written {
                r.device = Some(device); // nothing lost: the copy stays where it was
                return Err(e);
            }
            r.dirty = false;
            self.stats.write_backs += 1;
            self.stats.write_back_bytes += bytes;
            self.event(EventKind::WriteBack, uid, bytes, op, Some(started));
        }
        drop(device);
        self.stats.device_bytes -= bytes;
        self.stats.evictions += 1;
        self.stats.evicted_bytes += bytes;
        self.event(EventKind::Evict, uid, bytes, op, None);
        Ok(())
    }

    /// Ends a running op's use of a device copy; Genoa drops it right away.
    pub(crate) fn release(&mut self, uid: u64) {
        let Some(r) = self.map.get_mut(&uid) else { return };
        r.in_use = r.in_use.saturating_sub(1);
        if self.policy.drops_inputs_after_op() && r.in_use == 0 && !r.pinned && r.device.is_some() {
            let _ = self.evict(uid, "after op"); // a failed write-back keeps the copy
        }
    }

    /// Places an op's result computed on the device: checks the op's working set against the
    /// budget, makes room, and registers a new entry whose home is an empty host tensor.
    pub(crate) fn place_result(&mut self, result: tch::Tensor, op: &'static str, inputs: &[(TraceKey, u64)], anchor: Option<u64>) -> Result<Entry> {
        let bytes = footprint(&result).0;
        if let Some(cap) = self.cfg.simulated_capacity.filter(|_| self.cfg.device == ComputeDevice::Simulated) {
            if self.stats.device_bytes + bytes > cap {
                return Err(Error::OutOfMemory(format!(
                    "simulated device: {bytes} bytes for the result of `{op}` do not fit ({} of {cap} in use)",
                    self.stats.device_bytes
                )));
            }
        }
        self.make_room(bytes, op)?;
        let entry = Entry::new(self.cfg.device.empty_host(&result, self.cfg.pin_host_memory)?);
        let key = self.end_op(op, inputs, Some(bytes), anchor);
        let r = self.register(&entry);
        r.device = Some(result);
        r.dirty = true;
        r.key = key;
        self.stats.device_bytes += bytes;
        self.stats.peak_device_bytes = self.stats.peak_device_bytes.max(self.stats.device_bytes);
        if !self.policy.keeps_results() {
            // Returning the entry even if the write-back failed: its copy then stays on the
            // device (nothing lost), and dropping a registered entry here would re-enter the lock.
            let _ = self.evict(entry.uid(), op);
        }
        Ok(entry)
    }

    /// Records the op in the trace and advances the clock; returns its result's trace key.
    pub(crate) fn end_op(&mut self, op: &'static str, inputs: &[(TraceKey, u64)], output: Option<u64>, anchor: Option<u64>) -> TraceKey {
        self.clock += 1;
        self.stats.ops += 1;
        self.trace.op_end(op, inputs, output, anchor)
    }

    pub(crate) fn op_finished(&mut self, op: &'static str) {
        self.event(EventKind::OpEnd, 0, 0, op, None);
        if self.policy.prefetches() && self.cfg.prefetch_depth > 0 {
            self.prefetch();
        }
    }

    /// Loads the persistent inputs of the next recorded ops, evicting only clean copies needed
    /// later than the one being fetched (a speculative load never costs a write-back: a dirty
    /// tensor that is never used again is usually about to be released), and only if it fits
    /// beside every op that runs before its use (see `Trace::prefetch_plan`). Errors stop the
    /// prefetch; the op then loads what it needs.
    fn prefetch(&mut self) {
        let room = self.cfg.budget.saturating_sub(self.stats.pinned_bytes);
        let mut committed = 0;
        for (uid, before) in self.trace.prefetch_plan(self.cfg.prefetch_depth) {
            let Some(r) = self.map.get(&uid) else { continue };
            let (bytes, wanted) = (r.bytes, self.trace.next_use(r.key));
            if r.device.is_some() || r.pinned {
                continue;
            }
            if committed + bytes + before > room {
                return;
            }
            while self.stats.device_bytes + bytes > self.cfg.budget {
                let later = self.candidates().into_iter().filter(|c| !c.dirty && self.trace.next_use(c.key) > wanted).collect::<Vec<_>>();
                match self.policy.pick_victim(&later, self.clock, &self.trace) {
                    Some(victim) if self.evict(victim, "prefetch").is_ok() => {}
                    _ => return,
                }
            }
            if self.load(uid, "prefetch", EventKind::Prefetch).is_err() {
                return;
            }
            committed += bytes;
        }
    }

    /// Evicts every device copy no running op uses (out-of-memory recovery). Returns the count.
    pub(crate) fn evict_unused(&mut self) -> usize {
        let victims: Vec<u64> = self.candidates().iter().map(|c| c.uid).collect();
        victims.iter().filter(|&&uid| self.evict(uid, "out-of-memory recovery").is_ok()).count()
    }

    pub(crate) fn is_resident(&self, uid: u64) -> bool {
        self.map.get(&uid).is_some_and(|r| r.device.is_some())
    }

    /// The freshest copy of a registered entry, for reading its data.
    pub(crate) fn freshest(&self, uid: u64) -> Option<tch::Tensor> {
        let r = self.map.get(&uid)?;
        r.dirty.then(|| r.device.as_ref().map(tch::Tensor::shallow_clone)).flatten()
    }

    /// Writes back the device copy if it is newer, so the home copy can be modified or read.
    pub(crate) fn sync_home(&mut self, uid: u64) -> Result<()> {
        let Some(r) = self.map.get_mut(&uid) else { return Ok(()) };
        if let (true, Some(device)) = (r.dirty, &r.device) {
            self.cfg.device.write_back(device, &r.home)?;
            r.dirty = false;
            let bytes = r.bytes;
            self.stats.write_backs += 1;
            self.stats.write_back_bytes += bytes;
            self.event(EventKind::WriteBack, uid, bytes, "sync", None);
        }
        Ok(())
    }

    /// Makes the home copy the only current one: written back if the device copy is newer, and
    /// the device copy dropped unless pinned or in use (then it is only written back).
    pub(crate) fn settle_home(&mut self, uid: u64) -> Result<()> {
        match self.map.get(&uid) {
            Some(r) if r.device.is_some() && r.in_use == 0 && !r.pinned => self.evict(uid, "export"),
            Some(_) => self.sync_home(uid),
            None => Ok(()),
        }
    }

    pub(crate) fn forget(&mut self, uid: u64) {
        if let Some(r) = self.map.remove(&uid) {
            if r.device.is_some() {
                self.stats.device_bytes -= r.bytes;
            }
            if r.pinned {
                self.stats.pinned_bytes -= r.bytes;
            }
        }
    }

    /// Pins (or unpins) an entry's device copy: loaded now, never evicted, counted against the
    /// budget. Pinned bytes alone may not exceed the budget.
    pub(crate) fn pin(&mut self, entry: &Entry, pinned: bool) -> Result<()> {
        let r = self.register(entry);
        let (bytes, was_pinned, resident) = (r.bytes, r.pinned, r.device.is_some());
        if was_pinned == pinned {
            return Ok(());
        }
        if !pinned {
            r.pinned = false;
            self.stats.pinned_bytes -= bytes;
            return Ok(());
        }
        if self.policy.bounded() && self.stats.pinned_bytes + bytes > self.cfg.budget {
            return Err(Error::BudgetTooSmall { op: "pin_resident".into(), needed: self.stats.pinned_bytes + bytes, budget: self.cfg.budget });
        }
        if !resident {
            self.make_room(bytes, "pin_resident")?;
            self.load(entry.uid(), "pin_resident", EventKind::Load)?;
        }
        let r = self.map.get_mut(&entry.uid()).expect("registered");
        r.pinned = true;
        self.stats.pinned_bytes += bytes;
        Ok(())
    }

    /// Writes every newer device copy home and drops all device copies (before reconfiguring).
    pub(crate) fn drain(&mut self) -> Result<()> {
        let uids: Vec<u64> = self.map.iter().filter(|(_, r)| r.device.is_some()).map(|(&u, _)| u).collect();
        for uid in uids {
            self.map.get_mut(&uid).expect("listed").pinned = false;
            self.evict(uid, "drain")?;
        }
        self.stats.pinned_bytes = 0;
        Ok(())
    }
}

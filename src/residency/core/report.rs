//! What the manager reports: counters (`ResidencyStats`, also the C ABI's struct), events
//! delivered to a callback as they happen, and a timeline of the same events written as Chrome
//! trace / Perfetto JSON (open it at ui.perfetto.dev or chrome://tracing) or drawn as a picture
//! of memory over time (`picture`).

use crate::residency::core::storage::ByRole;
use std::fmt::Write as _;
use std::time::Instant;
use tensorref_derive::CEnum;

/// Counters since the manager was configured. Bytes are the manager's device bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResidencyStats {
    /// The device budget in bytes; UINT64_MAX under Resident, which has none.
    pub budget: u64,
    pub device_bytes: u64,
    pub peak_device_bytes: u64,
    pub pinned_bytes: u64,
    pub ops: u64,
    pub loads: u64,
    pub load_bytes: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    pub write_backs: u64,
    pub write_back_bytes: u64,
    pub prefetches: u64,
    pub prefetch_bytes: u64,
    /// Inputs found on the device because a prefetch brought them.
    pub prefetch_hits: u64,
    /// Inputs loaded at op time while the program followed a recorded trace.
    pub prefetch_misses: u64,
    /// Host time spent starting loads and write-backs, and waiting for those that copy
    /// synchronously (all of them on the simulated device), in nanoseconds.
    pub transfer_wait_ns: u64,
    /// Time ops' kernels waited for their inputs' copies, in nanoseconds: what "the copies did
    /// not stall the device" measures. On CUDA, the compute stream's waits for copies that had not
    /// ended when the op was queued, timed by events on the stream (counted once the stream has
    /// passed them); on the simulated device, the copies made when an op needed them (each a
    /// wait of its whole length on a GPU), where a prefetch's copy counts nothing.
    pub load_wait_ns: u64,
    /// Ops retried after an out-of-memory error made the manager evict.
    pub oom_retries: u64,
    /// New page-locked memory the manager's requests made the allocator allocate (a home for a
    /// result leaving the device, or for a tensor made elsewhere, moved into page-locked memory
    /// the first time the manager sees it), and the bytes of those requests. A request the
    /// allocator's cache serves (microseconds on CUDA, where a new block costs milliseconds) is
    /// not counted.
    pub page_locked_allocs: u64,
    pub page_locked_bytes: u64,
    /// Copies from or to pageable host memory (synchronous on CUDA, and about a third as fast).
    pub pageable_copies: u64,
    pub pageable_copy_bytes: u64,
    /// Ops that made the host wait for a write-back before returning: memory shared with code
    /// outside the library is written through (never the case for the manager's own tensors).
    pub write_through_waits: u64,
    /// Data reads that waited for a write-back still copying into the home.
    pub read_waits: u64,
    /// Write-backs of a device copy no op had modified (always 0; a guard against regressions).
    pub needless_write_backs: u64,
    /// Evictions that dropped a result to be made again rather than writing it back, and their
    /// bytes (see `Recompute`).
    pub drops: u64,
    pub dropped_bytes: u64,
    /// Results made again from their inputs, and their bytes.
    pub recomputations: u64,
    pub recomputed_bytes: u64,
    /// What CUDA's caching allocator holds on the device (reserved: in use by any tensor, the
    /// manager's or not, or cached for reuse), now and at its peak; the gap to the manager's
    /// device bytes is other tensors and fragmentation. 0 on other devices.
    pub reserved_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Times the host waited for the device to finish with memory let go of (a copy evicted or
    /// forgotten) before that memory could hold a new copy or result within the budget, and the
    /// host time those waits took, in nanoseconds: how often the host ran as far ahead of the
    /// device as the budget lets it (on the simulated device, only when a test makes it run
    /// behind the host).
    pub freeing_waits: u64,
    pub freeing_wait_ns: u64,
    /// Bytes of results that appeared on the device without room made for them beforehand, on a
    /// device whose kernels allocate without asking (CUDA): by as much the device may have held
    /// more than the budget while they did. The `tensorref` device and the ops generated from
    /// libtorch's schema reserve room for an op's outputs from their sizes before its kernel
    /// runs, so of theirs only outputs whose sizes depend on their data count; the op table's
    /// hand-written ops do not reserve, and all of theirs count. 0 on the simulated device, whose
    /// kernels ask for room as they allocate (unless it allocates as CUDA's).
    pub output_bytes_unreserved: u64,
}

impl ResidencyStats {
    pub(crate) fn count_page_locked(&mut self, allocations: u64, bytes: u64) {
        if allocations > 0 {
            self.page_locked_allocs += allocations;
            self.page_locked_bytes += bytes;
        }
    }
}

/// What a residency manager event reports.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, CEnum)]
#[c_enum(what = "event kind")]
pub enum EventKind {
    /// A storage was copied to the device for an op.
    Load = 0,
    /// A storage's device copy was dropped to make room.
    Evict = 1,
    /// A device copy newer than its home was copied home.
    WriteBack = 2,
    /// An op began.
    OpBegin = 3,
    /// An op ended.
    OpEnd = 4,
    /// A storage was copied to the device ahead of its recorded next use.
    Prefetch = 5,
    /// A dropped result was made again from its inputs.
    Recompute = 6,
    /// A result's device copy was dropped to be made again, rather than written back.
    Drop = 7,
}

/// One event; `device_bytes` is the manager's device bytes right after it.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub kind: EventKind,
    /// The entry (tensor storage) concerned, 0 for op events.
    pub entry: u64,
    pub bytes: u64,
    pub device_bytes: u64,
    pub op: &'static str,
    /// Microseconds since the manager was configured.
    pub time_us: f64,
    /// Duration of a transfer, in microseconds (0 for op events).
    pub duration_us: f64,
}

/// A function told of every event.
pub type Callback = Box<dyn Fn(&Event) + Send + Sync>;

pub(crate) struct Reporter {
    start: Instant,
    pub(crate) callback: Option<Callback>,
    timeline: Option<Timeline>,
}

/// The recorded events, each with the device bytes of each role right after it, and the times
/// iterations began (marked by the program, or found by Flow).
#[derive(Default)]
pub(crate) struct Timeline {
    pub(crate) events: Vec<(Event, ByRole)>,
    pub(crate) iterations: Vec<f64>,
}

impl Reporter {
    pub(crate) fn new() -> Reporter {
        Reporter { start: Instant::now(), callback: None, timeline: None }
    }

    pub(crate) fn now_us(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1e6
    }

    /// Whether anything is told of events (a callback, or the timeline): without, an event costs
    /// nothing, not even a clock read.
    pub(crate) fn listened(&self) -> bool {
        self.callback.is_some() || self.timeline.is_some()
    }

    pub(crate) fn emit(&mut self, event: Event, by_role: ByRole) {
        debug_assert_eq!(by_role.0.iter().sum::<u64>(), event.device_bytes, "the device bytes by role add up to the device bytes");
        if let Some(cb) = &self.callback {
            cb(&event);
        }
        if let Some(t) = &mut self.timeline {
            t.events.push((event, by_role));
        }
    }

    /// An iteration begins now (kept on the timeline).
    pub(crate) fn iteration(&mut self) {
        if self.timeline.is_some() {
            let now = self.now_us();
            self.timeline.as_mut().expect("recording").iterations.push(now);
        }
    }

    pub(crate) fn start_timeline(&mut self) {
        self.timeline = Some(Timeline::default());
    }

    pub(crate) fn timeline(&self) -> Option<&Timeline> {
        self.timeline.as_ref()
    }

    /// The recorded events as Chrome trace JSON: ops on one track, transfers on another, and a
    /// counter track of device bytes.
    pub(crate) fn timeline_json(&self) -> Option<String> {
        let events = self.timeline.as_ref()?.events.iter().map(|(e, _)| e);
        let mut out = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
        let _ = write!(out, r#"{{"ph":"M","pid":1,"tid":1,"name":"thread_name","args":{{"name":"ops"}}}},"#);
        let _ = writeln!(out, r#"{{"ph":"M","pid":1,"tid":2,"name":"thread_name","args":{{"name":"transfers"}}}}"#);
        for e in events {
            let (ts, bytes, dev) = (e.time_us, e.bytes, e.device_bytes);
            let _ = match e.kind {
                EventKind::OpBegin => write!(out, r#",{{"ph":"B","pid":1,"tid":1,"ts":{ts:.3},"name":"{}"}}"#, e.op),
                EventKind::OpEnd => write!(out, r#",{{"ph":"E","pid":1,"tid":1,"ts":{ts:.3}}}"#),
                kind => write!(
                    out,
                    r#",{{"ph":"X","pid":1,"tid":2,"ts":{:.3},"dur":{:.3},"name":"{kind:?}","args":{{"entry":{},"bytes":{bytes},"op":"{}"}}}}"#,
                    ts - e.duration_us, e.duration_us, e.entry, e.op
                ),
            };
            let _ = writeln!(out, r#",{{"ph":"C","pid":1,"ts":{ts:.3},"name":"device bytes","args":{{"bytes":{dev}}}}}"#);
        }
        out.push_str("]}\n");
        Some(out)
    }
}

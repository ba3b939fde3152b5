//! The residency manager through the C ABI: configuration, statistics, iteration marks, pins,
//! the event callback, the timeline and the schedule model.

use super::boundary::{call, out_arg};
use super::handles::TrTensor;
use crate::error::{Error, Status};
use crate::registry::TensorId;
use crate::residency::model::ScheduleModel;
use crate::residency::{self, Device, Config, DeviceMemory, Event, Policy, Recompute, ResidencyStats};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::mem::ManuallyDrop;
use std::sync::Mutex;
use tensorref_derive::CEnum;

/// A kind of device: where the residency manager computes (`tr_residency_config`), and where a
/// tensor's memory is (`tr_tensor_device`, `tr_live_bytes`), each with a device index beside it.
/// Values from 3 on are reserved for kinds to come (the `tensorref` device of libtorch's
/// dispatcher, should a handle ever name it).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, CEnum)]
#[c_enum(what = "device kind")]
pub enum DeviceKind {
    /// Host memory; nothing moves (the manager only accounts).
    Cpu = 0,
    /// A CUDA device (`device_index` says which).
    Cuda = 1,
    /// Host memory accounted as device memory, with real copies on load and write-back.
    Simulated = 2,
}

/// A `tr_device` as it crosses the ABI (`DeviceKind::try_from` checks it).
/// cbindgen:ignore
pub type TrDevice = i32;
/// A `tr_policy` as it crosses the ABI (`Policy::try_from` checks it).
/// cbindgen:ignore
pub type TrPolicy = i32;
/// A `tr_recompute` as it crosses the ABI (`Recompute::try_from` checks it).
/// cbindgen:ignore
pub type TrRecompute = i32;
/// A `tr_event_kind` as it crosses the ABI.
/// cbindgen:ignore
pub type TrEventKind = i32;

/// How the residency manager runs. Start from `tr_residency_config_default`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TrResidencyConfig {
    pub device: TrDevice,
    /// The CUDA device number (TR_DEVICE_CUDA only).
    pub device_index: i32,
    pub policy: TrPolicy,
    /// Hard limit on the bytes the manager holds on the device (Resident ignores it).
    pub budget_bytes: u64,
    /// Page-locked host copies (asynchronous CUDA copies).
    pub pin_host_memory: bool,
    /// How many recorded ops ahead Flow looks for loads to start while the budget has room,
    /// once it follows a recorded trace (0: no prefetch).
    pub prefetch_depth: u32,
    /// The simulated device's physical memory; 0 for unlimited.
    pub simulated_capacity: u64,
    /// Whether evicted results that can be made again from their inputs are dropped rather
    /// than written back: never, when that is estimated cheaper, or always.
    pub recompute: TrRecompute,
}

/// One manager event, valid only during the callback.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TrEvent {
    pub kind: TrEventKind,
    /// The storage concerned (shared by aliases; not a handle), 0 for op events.
    pub entry: u64,
    pub bytes: u64,
    /// The manager's device bytes right after the event.
    pub device_bytes: u64,
    /// The op's name (static text).
    pub op: *const c_char,
    /// Microseconds since the manager was configured.
    pub time_us: f64,
    /// Duration of a transfer in microseconds (0 for op events).
    pub duration_us: f64,
}

/// A function receiving manager events; `user` is the pointer given with it.
pub type TrEventFn = Option<extern "C" fn(event: *const TrEvent, user: *mut c_void)>;

/// Fills `*out` with the defaults: simulated device, Flow, no budget (set one), page-locked host
/// memory, prefetch as far ahead as the budget allows (depth 256 ops), unlimited simulated
/// capacity, no recomputation. Errors: TR_ERR_NULL_ARG.
#[no_mangle]
pub extern "C" fn tr_residency_config_default(out: *mut TrResidencyConfig) -> Status {
    call(|| {
        *out_arg(out, "out")? = TrResidencyConfig {
            device: DeviceKind::Simulated as i32,
            device_index: 0,
            policy: Policy::Flow as i32,
            budget_bytes: 0,
            pin_host_memory: true,
            prefetch_depth: residency::DEFAULT_PREFETCH_DEPTH as u32,
            simulated_capacity: 0,
            recompute: Recompute::Off as i32,
        };
        Ok(())
    })
}

/// Starts (or replaces) the process's residency manager; from now on ops bring their inputs to
/// the compute device and the policy places their results. A previous manager first writes its
/// newer device copies back; its event callback carries over, its counters, pins, recorded
/// trace and timeline do not. Call it while no op runs on another thread. Errors: TR_ERR_NULL_ARG; TR_ERR_INVALID_ARG (unknown device or
/// policy, a budget of 0 for Genoa or Flow); TR_ERR_DEVICE (no such CUDA device).
#[no_mangle]
pub extern "C" fn tr_residency_configure(config: *const TrResidencyConfig) -> Status {
    call(|| {
        let c = *out_arg(config.cast_mut(), "config")?;
        let device = match DeviceKind::try_from(c.device)? {
            DeviceKind::Cpu => Device::Cpu,
            DeviceKind::Cuda => Device::Cuda(usize::try_from(c.device_index).map_err(|_| Error::InvalidArg(format!("device_index {}", c.device_index)))?),
            DeviceKind::Simulated => Device::Simulated,
        };
        residency::configure(Config {
            device,
            budget_bytes: c.budget_bytes,
            policy: Policy::try_from(c.policy)?,
            pin_host_memory: c.pin_host_memory,
            prefetch_depth: c.prefetch_depth as usize,
            simulated_capacity: (c.simulated_capacity > 0).then_some(c.simulated_capacity),
            recompute: Recompute::try_from(c.recompute)?,
            rates: None,
        })
    })
}

/// Whether a residency manager is configured. Never fails; leaves the last error alone.
#[no_mangle]
pub extern "C" fn tr_residency_enabled() -> bool {
    residency::enabled()
}

/// Whether the tensors autograd saves for backward go through the manager by the library's own
/// engine hooks: a manager that moves data is configured, and backward runs on libtorch's engine.
/// Not where PyTorch's Python engine does (a Python process that imported torch): the binding
/// hands them over there through its hooks and `tr_saved_pack`. Never fails; leaves the last
/// error alone.
#[no_mangle]
pub extern "C" fn tr_residency_saved_tensors_managed() -> bool {
    residency::saved_tensors_managed()
}

/// Stops the manager: newer device copies are written back and every device copy is freed; the
/// event callback and the timeline go with it. Without a manager this does nothing. Call it
/// while no op runs on another thread.
#[no_mangle]
pub extern "C" fn tr_residency_disable() -> Status {
    call(residency::disable)
}

/// Writes the manager's counters. Errors: TR_ERR_NULL_ARG; TR_ERR_INVALID_ARG without a manager.
#[no_mangle]
pub extern "C" fn tr_residency_stats_get(out: *mut ResidencyStats) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = residency::stats().ok_or_else(|| Error::InvalidArg("no residency manager is configured".into()))?;
        Ok(())
    })
}

/// Writes the simulated device's memory as its allocator counts it: the bytes alive, the most
/// alive at once (since the last `reset_peak`, which starts it again from what is alive now), and
/// those running ops allocated that are no storage of the manager's yet. The budget holds of
/// `peak`. All zero before a manager on the simulated device was first configured. Errors:
/// TR_ERR_NULL_ARG.
#[no_mangle]
pub extern "C" fn tr_residency_device_memory(reset_peak: bool, out: *mut DeviceMemory) -> Status {
    call(|| {
        *out_arg(out, "out")? = residency::device_memory(reset_peak);
        Ok(())
    })
}

/// With `on`, the simulated device's kernels allocate as CUDA's do from now on: counted by
/// `tr_residency_device_memory`, but without asking the manager for room, which is then made
/// before each op's kernel for the outputs it will make (from their sizes), as on CUDA. For tests
/// of that path on a machine without a GPU; off by default.
#[no_mangle]
pub extern "C" fn tr_residency_simulate_cuda_allocator(on: bool) -> Status {
    call(|| {
        residency::simulate_cuda_allocator(on);
        Ok(())
    })
}

/// Starts logging each iteration for the schedule model (`tr_residency_schedule_model`). Under
/// recompute "cheaper", which prices with it, the manager logs from the start and this keeps that
/// log. Errors: TR_ERR_INVALID_ARG without a manager.
#[no_mangle]
pub extern "C" fn tr_residency_schedule_log_start() -> Status {
    call(residency::schedule_log_start)
}

/// Writes the schedule model of the last complete iteration logged since
/// `tr_residency_schedule_log_start` (a model of the manager's copies and ops on a GPU: a copy
/// engine each way and a compute engine, at the rates the manager prices with; on the simulated
/// device an H100's), its matrix products counting elements of `element_bytes` bytes: a lower
/// bound of the iteration's time on such a GPU, beside the same iteration with everything
/// resident. Errors: TR_ERR_NULL_ARG; TR_ERR_INVALID_ARG without a manager, before an iteration
/// was logged, or with `element_bytes` not 1, 2, 4 or 8.
#[no_mangle]
pub extern "C" fn tr_residency_schedule_model(element_bytes: usize, out: *mut ScheduleModel) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = residency::schedule_model(element_bytes)?;
        Ok(())
    })
}

/// Marks the end of an iteration (a step, a forward pass): Flow evicts and prefetches by the ops
/// since the previous mark. Errors: TR_ERR_INVALID_ARG without a manager.
#[no_mangle]
pub extern "C" fn tr_residency_mark_iteration() -> Status {
    call(residency::mark_iteration)
}

/// Pins `t` resident on the device (`pinned` true: loaded now, never evicted, counted against
/// the budget) or unpins it. Errors: bad handles; TR_ERR_BUDGET_TOO_SMALL when the pinned bytes
/// would exceed the budget; TR_ERR_INVALID_ARG without a manager.
#[no_mangle]
pub extern "C" fn tr_tensor_pin_resident(t: TrTensor, pinned: bool) -> Status {
    call(|| borrowed(t).pin_resident(pinned))
}

/// Writes whether `t` has a copy on the compute device now. Errors: TR_ERR_NULL_ARG, bad
/// handles, TR_ERR_INVALID_ARG without a manager.
#[no_mangle]
pub extern "C" fn tr_tensor_is_resident(t: TrTensor, out: *mut bool) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = borrowed(t).is_resident()?;
        Ok(())
    })
}

struct CCallback {
    f: extern "C" fn(*const TrEvent, *mut c_void),
    user: *mut c_void,
}

impl CCallback {
    fn call(&self, event: &TrEvent) {
        (self.f)(event, self.user);
    }
}

// SAFETY: the caller of `tr_residency_set_callback` promises that `f` may be called with `user`
// from any thread that runs ops (documented there).
unsafe impl Send for CCallback {}
unsafe impl Sync for CCallback {}

/// Static NUL-terminated copies of the (static) op names, made once per name.
fn c_name(name: &'static str) -> *const c_char {
    static NAMES: Mutex<Option<HashMap<&'static str, &'static CStr>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = names.get_or_insert_with(HashMap::new);
    names
        .entry(name)
        .or_insert_with(|| Box::leak(CString::new(name).unwrap_or_default().into_boxed_c_str()))
        .as_ptr()
}

/// Calls `callback(event, user)` for every manager event (load, evict, write-back, prefetch, op
/// begin/end), on the thread that caused it, while the manager is locked: the callback must not
/// call libtensorref, and `user` must be usable from any thread. NULL removes the callback. When
/// this function returns, the previous callback is no longer running and will not be called
/// again (events are delivered under the manager's lock).
/// Errors: TR_ERR_INVALID_ARG without a manager.
#[no_mangle]
pub extern "C" fn tr_residency_set_callback(callback: TrEventFn, user: *mut c_void) -> Status {
    call(|| {
        let bridge = callback.map(|f| {
            let cb = CCallback { f, user };
            Box::new(move |e: &Event| {
                let event = TrEvent {
                    kind: e.kind as i32,
                    entry: e.entry,
                    bytes: e.bytes,
                    device_bytes: e.device_bytes,
                    op: c_name(e.op),
                    time_us: e.time_us,
                    duration_us: e.duration_us,
                };
                cb.call(&event);
            }) as Box<dyn Fn(&Event) + Send + Sync>
        });
        residency::set_callback(bridge)
    })
}

/// Starts recording the manager's events for `tr_residency_timeline_write`.
/// Errors: TR_ERR_INVALID_ARG without a manager.
#[no_mangle]
pub extern "C" fn tr_residency_timeline_start() -> Status {
    call(residency::timeline_start)
}

/// Writes the recorded events to `path` (NUL-terminated UTF-8): to a path ending in `.svg`, a
/// picture of memory over time (the device bytes stacked by what they hold: weights and inputs,
/// activations, saved for backward, gradients, state across iterations; the budget line; loads,
/// prefetches and write-backs; where iterations began); to any other, Chrome trace / Perfetto
/// JSON (ui.perfetto.dev). Errors: TR_ERR_NULL_ARG; TR_ERR_INVALID_ARG (no manager, no timeline started); TR_ERR_IO
/// (the path cannot be written).
#[no_mangle]
pub extern "C" fn tr_residency_timeline_write(path: *const c_char) -> Status {
    call(|| {
        if path.is_null() {
            return Err(Error::NullArg("path"));
        }
        // SAFETY: the caller passes a NUL-terminated string (documented).
        let path = unsafe { CStr::from_ptr(path) }.to_str().map_err(|_| Error::InvalidArg("path is not UTF-8".into()))?;
        residency::timeline_write(std::path::Path::new(path))
    })
}

/// A non-owning view of a borrowed C handle.
fn borrowed(t: TrTensor) -> ManuallyDrop<Tensor> {
    ManuallyDrop::new(Tensor::from_raw(TensorId::from(t)))
}

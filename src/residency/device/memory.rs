//! The simulated device's memory as its allocator sees it (`src/residency/device/memory.cpp`): the
//! real bytes of its copies alive, counted where they are allocated and freed, not in the
//! manager's books. An op's kernel runs in `Mode::Kernel`: each allocation first asks the manager
//! for room (`room_for`), so an op's outputs and its scratch find room before they exist, and the
//! budget holds of real memory at every moment. Until the manager registers a block as a storage
//! (`adopt`) its bytes are in flight, and the manager counts them beside its storages.
//!
//! `simulate_cuda_allocator` makes kernels allocate as on CUDA instead, counted but without
//! asking: the room for their outputs is then made beforehand from their sizes (`core::outputs`),
//! and the allocator's peak shows whether that held the budget.
//!
//! What the CPU's worker threads allocate inside a parallel kernel is not seen (their mode is the
//! host's); libtorch's CPU kernels allocate their outputs on the calling thread.

use crate::residency::with;
use crate::error::Error;
use std::cell::{Cell, RefCell};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

// The shims are internal: keep them out of the public header.
#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_device_memory_install(room: unsafe extern "C" fn(u64) -> c_int);
    fn tr_native_device_mode(to: c_int) -> c_int;
    fn tr_native_device_lead(n: u64);
    fn tr_native_device_memory(out: *mut u64, reset_peak: c_int);
    fn tr_native_device_adopt(t: *const std::ffi::c_void);
    fn tr_native_device_reserve(bytes: u64);
    fn tr_native_device_kernel_peak() -> u64;
    fn tr_native_device_scratch(bytes: u64);
}

/// What a thread's allocations are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum Mode {
    /// Host memory: not counted.
    Host = 0,
    /// Device memory whose room the manager made beforehand (a load, a remake).
    Count = 1,
    /// Device memory of a running op's kernel: room is asked for before each allocation.
    Kernel = 2,
    /// Device memory of a running op's kernel where the device allocates as CUDA's does: room for
    /// its outputs was reserved beforehand, and what it allocates beyond them is measured.
    Unasked = 3,
}

thread_local! {
    /// This thread's mode as last set through `Scope` (the allocator keeps its own copy), so that
    /// code outside any device scope can tell without calling into C++.
    static MODE: Cell<Mode> = const { Cell::new(Mode::Host) };
    /// The op whose kernel runs on this thread, and why the manager refused it room.
    static KERNEL_OP: Cell<&'static str> = const { Cell::new("") };
    static REFUSED: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// The simulated device's memory as its allocator counts it, in bytes (all zero on other
/// devices, whose memory it does not see).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Alive now.
    pub live: u64,
    /// The most alive at any moment since the last reset.
    pub peak: u64,
    /// Allocated by running kernels and not yet a storage of the manager's.
    pub in_flight: u64,
    /// In flight on this thread.
    pub in_flight_here: u64,
    /// The most a kernel allocated beyond the room reserved for its outputs, at once, since the
    /// last reset, where the device allocates as CUDA's does (`simulate_cuda_allocator`; 0
    /// otherwise): its scratch, which on CUDA is outside the budget (all it allocated, for an op
    /// that reserved no room: `dropout`, an op writing in place), so `peak` holds within the
    /// budget plus this and the outputs that came unreserved.
    pub scratch_peak: u64,
}

static AS_CUDA: AtomicBool = AtomicBool::new(false);

/// With `on`, the simulated device's kernels allocate as CUDA's do from now on: their memory is
/// counted (`device_memory`) but no allocation asks the manager for room, so the room for an op's
/// outputs is made before its kernel runs, from their sizes, as on CUDA. For tests and
/// benchmarks of that path on a machine without a GPU.
pub fn simulate_cuda_allocator(on: bool) {
    AS_CUDA.store(on, Ordering::SeqCst);
}

pub(crate) fn cuda_allocator_simulated() -> bool {
    AS_CUDA.load(Ordering::Relaxed)
}

/// Puts the counting allocator in front of libtorch's CPU allocator (for the simulated device).
pub(crate) fn install() {
    unsafe { tr_native_device_memory_install(room_for) }
}

/// The counts now; with `reset_peak`, the peak starts again from what is alive.
pub fn device_memory(reset_peak: bool) -> DeviceMemory {
    let mut out = [0u64; 5];
    unsafe { tr_native_device_memory(out.as_mut_ptr(), c_int::from(reset_peak)) };
    DeviceMemory { live: out[0], peak: out[1], in_flight: out[2], in_flight_here: out[3], scratch_peak: out[4] }
}

/// The first `n` bytes of this thread's next counted allocation are no device memory: the padding
/// that keeps a simulated copy's data at its home's alignment, which a GPU's copy does not need.
pub(crate) fn lead(n: u64) {
    unsafe { tr_native_device_lead(n) }
}

/// The manager registers `t`'s memory as a storage: its bytes are no longer in flight.
pub(crate) fn adopt(t: &tch::Tensor) {
    unsafe { tr_native_device_adopt(t.as_ptr().cast()) }
}

/// The most of what this thread's kernels allocated since the last call was alive at once
/// (adopted as storages or not): starts again from now.
pub(crate) fn kernel_peak() -> u64 {
    unsafe { tr_native_device_kernel_peak() }
}

/// A kernel that allocated as CUDA's do allocated `bytes` beyond its outputs at its peak.
pub(crate) fn scratch(bytes: u64) {
    unsafe { tr_native_device_scratch(bytes) }
}

/// This thread's mode until the scope ends.
pub(crate) struct Scope(Mode);

impl Scope {
    pub(crate) fn enter(mode: Mode) -> Scope {
        unsafe { tr_native_device_mode(mode as c_int) };
        Scope(MODE.with(|m| m.replace(mode)))
    }

    /// Host memory until the scope ends, where the thread is inside a device scope (None
    /// elsewhere: nothing to change).
    pub(crate) fn host() -> Option<Scope> {
        (MODE.with(Cell::get) != Mode::Host).then(|| Scope::enter(Mode::Host))
    }

    /// A running op's kernel (`op`): room is asked for each allocation, and a refusal is kept
    /// for `refusal`; counted without asking where the device allocates as CUDA's does
    /// (`simulate_cuda_allocator`).
    pub(crate) fn kernel(op: &'static str) -> Scope {
        if cuda_allocator_simulated() {
            return Scope::enter(Mode::Unasked);
        }
        KERNEL_OP.with(|o| o.set(op));
        Scope::enter(Mode::Kernel)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        unsafe { tr_native_device_mode(self.0 as c_int) };
        MODE.with(|m| m.set(self.0));
    }
}

/// Why the manager refused the running kernel room, if it did (the kernel then failed with a
/// libtorch error that says less).
pub(crate) fn refusal() -> Option<Error> {
    REFUSED.with(|r| r.borrow_mut().take())
}

/// The allocator asks for room for `bytes` in a kernel on this thread; 0 when made, and then
/// counted in flight.
unsafe extern "C" fn room_for(bytes: u64) -> c_int {
    let op = KERNEL_OP.with(Cell::get);
    let made = std::panic::catch_unwind(|| loop {
        let made = with(|m| {
            m.make_room(bytes, op)?;
            m.kernel_allocates(bytes);
            // In flight from now, before the lock is released: no other op is granted this room.
            unsafe { tr_native_device_reserve(bytes) };
            Ok(())
        });
        match made {
            // Backward cannot run again from the start: it waits for the room in place.
            Err(Error::RoomTaken { freed, .. }) if op == "backward" => crate::residency::core::room::wait_for_free(freed),
            made => break made,
        }
    });
    match made {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            REFUSED.with(|r| *r.borrow_mut() = Some(e));
            1
        }
        Err(_) => {
            REFUSED.with(|r| *r.borrow_mut() = Some(Error::Device(format!("`{op}`: making room for its memory panicked"))));
            1
        }
    }
}

//! Asynchronous CUDA copies for the manager, through src/residency/device/cuda.cpp: loads on a side
//! stream that the compute stream waits for only when an op needs the data, and write-backs on a
//! second side stream after the compute work that produced the data, so that the two directions
//! overlap. A load of a home still being written is queued behind that write-back, on its stream.
//! The host waits only where it reads a home. Used only with `Device::Cuda`.

use crate::error::{Error, Result};
use crate::shim::{check, ERR_LEN};
use std::ffi::{c_char, c_int, c_void};
use crate::residency::model::Rates;
use std::ptr::NonNull;
use std::time::Instant;
use tch::{Kind, Tensor};

// The shim is internal: keep it out of the public header.
#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_load_async(host: *const c_void, index: c_int, after_write: c_int, out_tensor: *mut *mut c_void, out_event: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_copy_wait(event: *mut c_void, tensor: *const c_void, out_stall: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_stall_ns(stall: *mut c_void, out_ns: *mut u64) -> c_int;
    fn tr_native_stall_free(stall: *mut c_void);
    fn tr_native_event_free(event: *mut c_void);
    fn tr_native_write_back_async(device_tensor: *const c_void, host: *const c_void, out_event: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_stream_event(index: c_int, write_back: c_int, out_event: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_event_synchronize(event: *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_event_query(event: *mut c_void) -> c_int;
    fn tr_native_cuda_reserved(index: i64, now: *mut u64, peak: *mut u64, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_cuda_reset_peak(index: i64, err: *mut c_char, err_len: usize) -> c_int;
}

/// The end of a copy on a side stream.
pub(crate) struct Event(NonNull<c_void>);

// SAFETY: a c10::Event may be recorded, waited on, queried and freed from any thread; the manager
// shares one only to wait on it.
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event came from the shim and is freed once.
        unsafe { tr_native_event_free(self.0.as_ptr()) }
    }
}

fn event(raw: *mut c_void) -> Result<Event> {
    NonNull::new(raw).map(Event).ok_or_else(|| Error::Device("no event for the copy".into()))
}

impl Event {
    /// Makes the compute stream wait for the copy before the op that reads `tensor` (the host
    /// does not wait), and tells the caching allocator the compute stream uses `tensor`. Where
    /// the copy has not ended yet, the wait is timed (`Stall`).
    pub(crate) fn block_compute(&self, tensor: &tch::Tensor) -> Result<Option<Stall>> {
        let (mut stall, mut err) = (std::ptr::null_mut(), [0 as c_char; ERR_LEN]);
        // SAFETY: the event and the tensor are live; the out pointer is valid; the buffer has its
        // length.
        let status = unsafe { tr_native_copy_wait(self.0.as_ptr(), tensor.as_ptr().cast(), &mut stall, err.as_mut_ptr(), ERR_LEN) };
        check("copy wait", status, &err)?;
        Ok(NonNull::new(stall).map(Stall))
    }

    /// Blocks this thread until the copy has ended.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let mut err = [0 as c_char; ERR_LEN];
        // SAFETY: the event is live; the buffer has its length.
        let status = unsafe { tr_native_event_synchronize(self.0.as_ptr(), err.as_mut_ptr(), ERR_LEN) };
        Ok(check("copy synchronize", status, &err)?)
    }

    /// Whether the copy has ended (never waits).
    pub(crate) fn done(&self) -> bool {
        // SAFETY: the event is live.
        unsafe { tr_native_event_query(self.0.as_ptr()) != 0 }
    }
}

/// A wait of the compute stream for a copy that had not ended when the op was queued: timing
/// events around the wait, read once the stream has passed it.
pub(crate) struct Stall(NonNull<c_void>);

// SAFETY: as `Event`: c10 events may be queried and freed from any thread.
unsafe impl Send for Stall {}
unsafe impl Sync for Stall {}

impl Drop for Stall {
    fn drop(&mut self) {
        // SAFETY: the pair came from the shim and is freed once.
        unsafe { tr_native_stall_free(self.0.as_ptr()) }
    }
}

impl Stall {
    /// How long the compute stream waited, in nanoseconds, once it has passed the wait.
    pub(crate) fn ns(&self) -> Option<u64> {
        let mut ns = 0;
        // SAFETY: the pair is live; the out pointer is valid.
        (unsafe { tr_native_stall_ns(self.0.as_ptr(), &mut ns) } != 0).then_some(ns)
    }
}

/// Starts copying a host tensor to CUDA device `index`; with `after_write` (the home's
/// write-back may still be running) behind the write-backs. Asynchronous when the host memory is
/// page-locked; from pageable memory CUDA copies synchronously.
pub(crate) fn load_async(host: &tch::Tensor, index: usize, after_write: bool) -> Result<(tch::Tensor, Event)> {
    let (mut tensor, mut done) = (std::ptr::null_mut(), std::ptr::null_mut());
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: `host` is a live tensor; the out pointers are valid; the buffer has its length.
    let status = unsafe { tr_native_load_async(host.as_ptr().cast(), index as c_int, c_int::from(after_write), &mut tensor, &mut done, err.as_mut_ptr(), ERR_LEN) };
    check("load", status, &err)?;
    let done = event(done)?;
    // SAFETY: the shim returned a heap at::Tensor that we now own.
    Ok((unsafe { tch::Tensor::from_ptr(tensor.cast()) }, done))
}

/// Starts copying a device tensor into its host home after the compute work queued so far.
pub(crate) fn write_back_async(device: &tch::Tensor, host: &tch::Tensor) -> Result<Event> {
    let mut done = std::ptr::null_mut();
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: both tensors are live; the out pointer is valid; the buffer has its length.
    let status = unsafe { tr_native_write_back_async(device.as_ptr().cast(), host.as_ptr().cast(), &mut done, err.as_mut_ptr(), ERR_LEN) };
    check("write-back", status, &err)?;
    event(done)
}

/// The end of the work queued so far on CUDA device `index`'s compute stream, or with
/// `write_back` on its write-back stream.
pub(crate) fn stream_event(index: usize, write_back: bool) -> Result<Event> {
    let (mut done, mut err) = (std::ptr::null_mut(), [0 as c_char; ERR_LEN]);
    // SAFETY: the out pointer is valid; the buffer has its length.
    let status = unsafe { tr_native_stream_event(index as c_int, c_int::from(write_back), &mut done, err.as_mut_ptr(), ERR_LEN) };
    check("stream event", status, &err)?;
    event(done)
}

/// The bytes CUDA's caching allocator holds on device `index`, now and at their peak.
pub(crate) fn reserved(index: usize) -> Result<(u64, u64)> {
    let (mut now, mut peak, mut err) = (0, 0, [0 as c_char; ERR_LEN]);
    // SAFETY: plain out-parameters; the shim catches every C++ exception.
    let status = unsafe { tr_native_cuda_reserved(index as i64, &mut now, &mut peak, err.as_mut_ptr(), ERR_LEN) };
    check("cuda_reserved", status, &err)?;
    Ok((now, peak))
}

/// Gives the caching allocator's unused blocks on device `index` back and starts its peaks anew.
pub(crate) fn reset_peak(index: usize) -> Result<()> {
    let mut err = [0 as c_char; ERR_LEN];
    // SAFETY: a plain call; the shim catches every C++ exception.
    let status = unsafe { tr_native_cuda_reset_peak(index as i64, err.as_mut_ptr(), ERR_LEN) };
    Ok(check("cuda_reset_peak", status, &err)?)
}

/// CUDA device `index`'s rates, measured: the link by a 64 MiB copy from page-locked memory,
/// the memory bandwidth by a copy on the device (read and written), the matrix products by one
/// f32 product of 2048-square matrices, a launch by 100 small kernels issued back to back. Each
/// is timed twice between synchronisations of the device, the faster kept (the first warms up);
/// about 10 ms on an H100.
pub(crate) fn measure_rates(index: usize) -> Result<Rates> {
    const BYTES: i64 = 64 << 20;
    const N: i64 = 2048;
    const LAUNCHES: u32 = 100;
    let device = tch::Device::Cuda(index);
    let timed = |work: &mut dyn FnMut() -> std::result::Result<(), tch::TchError>| -> Result<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..2 {
            tch::Cuda::synchronize(index as i64);
            let started = Instant::now();
            work()?;
            tch::Cuda::synchronize(index as i64);
            best = best.min(started.elapsed().as_secs_f64());
        }
        Ok(best.max(1e-9))
    };
    let host = Tensor::f_zeros([BYTES], (Kind::Uint8, tch::Device::Cpu))?.f_pin_memory(device)?;
    let mut on_device = Tensor::f_zeros([BYTES], (Kind::Uint8, device))?;
    let mut other = Tensor::f_zeros([BYTES], (Kind::Uint8, device))?;
    let link = BYTES as f64 / timed(&mut || on_device.f_copy_(&host))?;
    let memory_bandwidth = 2.0 * BYTES as f64 / timed(&mut || other.f_copy_(&on_device))?;
    let a = Tensor::f_ones([N, N], (Kind::Float, device))?;
    let flops = 2.0 * (N * N * N) as f64 / timed(&mut || a.f_matmul(&a).map(drop))?;
    let small = Tensor::f_ones([4], (Kind::Float, device))?;
    let launch = timed(&mut || (0..LAUNCHES).try_for_each(|_| small.f_add_scalar(1.0).map(drop)))? / LAUNCHES as f64;
    Ok(Rates { link, flops, memory_bandwidth, launch })
}

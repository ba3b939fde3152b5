//! Asynchronous CUDA copies for the manager, through src/native/streams.cpp: loads on a side
//! stream that the compute stream waits for only when the op needs the data, and write-backs
//! ordered after the compute work that produced the data. Used only with `ComputeDevice::Cuda`.

use crate::error::{Error, Result};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::NonNull;

// The shim is internal: keep it out of the public header.
#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_load_async(host: *const c_void, index: c_int, out_tensor: *mut *mut c_void, out_event: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_copy_wait(event: *mut c_void, tensor: *const c_void, err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_event_free(event: *mut c_void);
    fn tr_native_write_back(device_tensor: *const c_void, host: *const c_void, err: *mut c_char, err_len: usize) -> c_int;
}

/// A copy still in flight on the side stream: the event that marks its end.
pub(crate) struct Pending(NonNull<c_void>);

// SAFETY: a c10::Event may be recorded, waited on and freed from any thread.
unsafe impl Send for Pending {}

impl Drop for Pending {
    fn drop(&mut self) {
        // SAFETY: the event came from tr_native_load_async and is freed once.
        unsafe { tr_native_event_free(self.0.as_ptr()) }
    }
}

fn check(status: c_int, err: &[c_char; 512]) -> Result<()> {
    if status == 0 {
        return Ok(());
    }
    // SAFETY: the shim NUL-terminates the message within the buffer.
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
    Err(tch::TchError::Torch(msg).into())
}

/// Starts copying a host tensor (pinned, for a truly asynchronous copy) to CUDA device `index`.
pub(crate) fn load_async(host: &tch::Tensor, index: usize) -> Result<(tch::Tensor, Pending)> {
    let (mut tensor, mut event) = (std::ptr::null_mut(), std::ptr::null_mut());
    let mut err = [0 as c_char; 512];
    // SAFETY: `host` is a live tensor; the out pointers are valid; the buffer has its length.
    let status = unsafe { tr_native_load_async(host.as_ptr().cast(), index as c_int, &mut tensor, &mut event, err.as_mut_ptr(), err.len()) };
    check(status, &err)?;
    let event = Pending(NonNull::new(event).ok_or_else(|| Error::Device("no event for the copy".into()))?);
    // SAFETY: the shim returned a heap at::Tensor that we now own.
    Ok((unsafe { tch::Tensor::from_ptr(tensor.cast()) }, event))
}

/// Makes the compute stream wait for the copy before the op that needs `tensor` runs.
pub(crate) fn wait(pending: Pending, tensor: &tch::Tensor) -> Result<()> {
    let mut err = [0 as c_char; 512];
    // SAFETY: the event and the tensor are live; the buffer has its length.
    let status = unsafe { tr_native_copy_wait(pending.0.as_ptr(), tensor.as_ptr().cast(), err.as_mut_ptr(), err.len()) };
    check(status, &err)
}

/// Copies a device tensor into its host home after the compute work queued so far.
pub(crate) fn write_back(device: &tch::Tensor, host: &tch::Tensor) -> Result<()> {
    let mut err = [0 as c_char; 512];
    // SAFETY: both tensors are live; the buffer has its length.
    let status = unsafe { tr_native_write_back(device.as_ptr().cast(), host.as_ptr().cast(), err.as_mut_ptr(), err.len()) };
    check(status, &err)
}

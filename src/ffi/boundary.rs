//! The panic boundary, the calling thread's last error message, and checked conversions of
//! the raw pointer arguments every C function receives.

use super::handles::TrTensor;
use crate::error::{panic_error, Error, Result, Status};
use crate::registry::{TensorId, TensorIds};
use crate::residency::python_hooks::Pushed;
use std::cell::RefCell;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Runs an `extern "C"` body: maps its error to a status and records the message for
/// `tr_last_error`; a panic becomes `TR_ERR_PANIC` and never unwinds into C. While it runs, the
/// saved-tensor hooks a Python binding adopted on this thread are pushed (`Pushed`), so what the
/// library's ops save for backward there reaches the manager.
///
/// `AssertUnwindSafe` is sound here: registry updates complete before anything that can panic,
/// and the registry lock recovers from poisoning (see `registry::lock`).
#[inline(always)]
pub(crate) fn call(f: impl FnOnce() -> Result<()>) -> Status {
    call_unhooked(|| {
        let _hooks = Pushed::new();
        f()
    })
}

/// `call` without pushing the adopted hooks: for the calls that adopt them and give them back,
/// and for the frequent ones that run no op (a handle's retain and release, once per temporary
/// in a Python session), which save nothing for backward.
#[inline(always)]
pub(crate) fn call_unhooked(f: impl FnOnce() -> Result<()>) -> Status {
    // The result becomes a status inside the unwind guard, so only a status crosses it: moving
    // the whole result out made every call copy the error's bytes before testing for one (a
    // wide load over the callee's one-byte store, which stalls).
    catch_unwind(AssertUnwindSafe(|| {
        let result = f();
        match result.is_ok() {
            true => Status::TR_OK,
            false => fail(result),
        }
    }))
    .unwrap_or_else(|payload| fail(Err(panic_error(payload))))
}

/// Records the error as this thread's last error and returns its status.
#[cold]
#[inline(never)]
fn fail(result: Result<()>) -> Status {
    let Err(e) = result else { return Status::TR_OK };
    let _ = LAST_ERROR.try_with(|m| *m.borrow_mut() = e.to_string());
    e.status()
}

/// Like `call`, but leaves the last error message alone (for `tr_last_error` itself).
fn call_quiet(f: impl FnOnce() -> Result<()>) -> Status {
    let result = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| Err(panic_error(payload)));
    result.map_or_else(|e| e.status(), |()| Status::TR_OK)
}

/// An output pointer, checked for NULL. It is written only once the call has succeeded.
pub(crate) fn out_arg<'a, T>(p: *mut T, name: &'static str) -> Result<&'a mut T> {
    // SAFETY: the C caller passes NULL or a valid, aligned, writable pointer (documented).
    unsafe { p.as_mut() }.ok_or(Error::NullArg(name))
}

/// An input array of `len` elements; NULL is accepted only when `len` is 0.
pub(crate) fn slice_arg<'a, T>(p: *const T, len: usize, name: &'static str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::NullArg(name));
    }
    // SAFETY: the C caller passes a pointer to `len` readable elements (documented).
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A mutable output array of `len` elements; NULL is accepted only when `len` is 0.
pub(crate) fn slice_out<'a, T>(p: *mut T, len: usize, name: &'static str) -> Result<&'a mut [T]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Error::NullArg(name));
    }
    // SAFETY: the C caller passes a pointer to `len` writable elements (documented).
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// An optional input value: NULL means none.
pub(crate) fn opt_arg<T: Copy>(p: *const T) -> Option<T> {
    // SAFETY: the C caller passes NULL or a valid, aligned, readable pointer (documented).
    unsafe { p.as_ref() }.copied()
}

/// An optional input array: NULL means none (an empty list is a non-NULL pointer, or any
/// pointer with `len` 0 but NULL).
pub(crate) fn opt_slice_arg<'a, T>(p: *const T, len: usize) -> Option<&'a [T]> {
    // SAFETY: as for `slice_arg`.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, len) })
}

/// An input string: NUL-terminated UTF-8.
pub(crate) fn str_arg<'a>(p: *const c_char, name: &'static str) -> Result<&'a str> {
    opt_str_arg(p, name)?.ok_or(Error::NullArg(name))
}

/// An optional input string: NULL means none.
pub(crate) fn opt_str_arg<'a>(p: *const c_char, name: &'static str) -> Result<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the C caller passes a NUL-terminated string (documented).
    let text = unsafe { std::ffi::CStr::from_ptr(p) };
    text.to_str().map(Some).map_err(|_| Error::InvalidArg(format!("{name} is not UTF-8")))
}

/// Stores the handles of an op's results and their number; when `out` is too small, releases them, and the
/// caller learns only the number (TR_ERR_BUFFER_TOO_SMALL).
pub(crate) fn store_list(out: &mut [TrTensor], written: &mut usize, ids: TensorIds) -> Result<()> {
    *written = ids.len();
    if ids.len() > out.len() {
        crate::registry::release_many(&ids)?;
        return Err(Error::BufferTooSmall { needed: ids.len(), given: out.len() });
    }
    for (slot, id) in out.iter_mut().zip(ids) {
        *slot = id.into();
    }
    Ok(())
}

/// An input array of tensor handles.
pub(crate) fn handles_arg(p: *const TrTensor, len: usize, name: &'static str) -> Result<Vec<TensorId>> {
    Ok(slice_arg(p, len, name)?.iter().map(|&t| t.into()).collect())
}

/// Copies the calling thread's last error message, NUL-terminated, into `buf`.
///
/// `*out_len` receives the message length in bytes, without the NUL, also when `len` is too
/// small (then nothing is copied and TR_ERR_BUFFER_TOO_SMALL is returned): call with `len` 0 and
/// `buf` NULL to size the buffer. The message is that of the last call on this thread that
/// failed; this function never changes it. Errors: TR_ERR_NULL_ARG if `out_len` is NULL, or `buf`
/// is NULL with `len` > 0.
#[no_mangle]
pub extern "C" fn tr_last_error(buf: *mut c_char, len: usize, out_len: *mut usize) -> Status {
    call_quiet(|| {
        let out_len = out_arg(out_len, "out_len")?;
        let buf = slice_out(buf, len, "buf")?;
        LAST_ERROR.with(|m| {
            let msg = m.borrow();
            *out_len = msg.len();
            if buf.len() <= msg.len() {
                return Err(Error::BufferTooSmall { needed: msg.len() + 1, given: buf.len() });
            }
            for (dst, src) in buf.iter_mut().zip(msg.bytes()) {
                *dst = src as c_char;
            }
            buf[msg.len()] = 0;
            Ok(())
        })
    })
}

/// How many panics the C boundary has caught in this process, each returned as TR_ERR_PANIC.
/// Every one is a bug of libtensorref, whatever the call's input: a correct run reads 0 (the
/// tests require it). Safe to call from any thread.
#[no_mangle]
pub extern "C" fn tr_panics_caught() -> u64 {
    crate::error::panics_caught()
}

/// Static English text for a status code (never NULL, never to be freed). Unknown codes get a
/// generic text.
#[no_mangle]
pub extern "C" fn tr_status_str(code: i32) -> *const c_char {
    Status::describe(code).as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        LAST_ERROR.with(|m| m.borrow().clone())
    }

    #[test]
    fn a_panic_becomes_a_status_and_its_first_line_the_message() {
        assert_eq!(call(|| panic!("boom\nsecond line")), Status::TR_ERR_PANIC);
        assert_eq!(last_error(), "panic inside libtensorref: boom");
        let owned = String::from("owned payload");
        assert_eq!(call(|| std::panic::panic_any(owned)), Status::TR_ERR_PANIC);
        assert_eq!(last_error(), "panic inside libtensorref: owned payload");
    }

    #[test]
    fn an_error_sets_the_message_and_success_leaves_it() {
        assert_eq!(call(|| Err(Error::NullArg("out"))), Status::TR_ERR_NULL_ARG);
        let message = last_error();
        assert!(message.contains("out"), "{message}");
        assert_eq!(call(|| Ok(())), Status::TR_OK);
        assert_eq!(last_error(), message);
    }
}

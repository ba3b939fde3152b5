//! PyTorch's saved-tensor hooks for the library's own ops only (python_hooks.cpp beside this file
//! says how). In a Python process that imported torch, the binding makes the hooks that hand what
//! the op table saves for backward to the manager, and `adopt` takes them off the thread's stack;
//! each C ABI call then holds a `Pushed`, which has them on the stack while the call runs.

use crate::shim::{run, Result};
use std::cell::Cell;
use std::ffi::{c_char, c_int};

#[allow(unused_doc_comments)]
/// cbindgen:ignore
extern "C" {
    fn tr_native_python_hooks_adopt(err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_python_hooks_return(err: *mut c_char, err_len: usize) -> c_int;
    fn tr_native_python_hooks_enter() -> c_int;
    fn tr_native_python_hooks_leave();
}

thread_local! {
    /// Whether this thread adopted hooks: spares every other call the shim.
    static ADOPTED: Cell<bool> = const { Cell::new(false) };
}

/// Takes the saved-tensor hooks on the top of this thread's stack for the library's calls.
pub(crate) fn adopt() -> Result<()> {
    // SAFETY: a call into the shim with its error buffer.
    run("adopt saved-tensor hooks", |err, len| unsafe { tr_native_python_hooks_adopt(err, len) })?;
    ADOPTED.set(true);
    Ok(())
}

/// Pushes the hooks `adopt` took back on this thread's stack; no-op without any.
pub(crate) fn give_back() -> Result<()> {
    ADOPTED.set(false);
    // SAFETY: a call into the shim with its error buffer.
    run("return saved-tensor hooks", |err, len| unsafe { tr_native_python_hooks_return(err, len) })
}

/// The adopted hooks on this thread's stack while it lives, where there are any.
pub(crate) struct Pushed(bool);

impl Pushed {
    #[inline(always)]
    pub(crate) fn new() -> Pushed {
        // SAFETY: the shim reads and writes this thread's state only, and cannot fail.
        Pushed(ADOPTED.get() && unsafe { tr_native_python_hooks_enter() } != 0)
    }
}

impl Drop for Pushed {
    #[inline(always)]
    fn drop(&mut self) {
        if self.0 {
            // SAFETY: pairs the enter that pushed them, on this thread.
            unsafe { tr_native_python_hooks_leave() }
        }
    }
}

//! Dispose scopes through the C ABI (docs/dispose-scopes.md). Scope stacks are per thread: a scope
//! opened on a thread captures the handles created on that thread. A scope may be disposed from
//! any thread (a finalizer, say); the thread's current scope then moves to the nearest open one.

use super::boundary::{call, handles_arg, out_arg};
use super::handles::{TrScope, TrStats, TrTensor};
use crate::error::Status;
use crate::registry;
use crate::scope::Stats;

/// Opens a scope on this thread and makes it current; handles created on this thread now
/// belong to it. Dispose it with `tr_scope_dispose`. Scopes a thread leaves open are disposed
/// when it exits (the main thread's at process exit, before atexit handlers run).
/// Errors: TR_ERR_NULL_ARG; TR_ERR_INVALID_ARG on a thread that is exiting (an atexit handler).
#[no_mangle]
pub extern "C" fn tr_scope_new(out: *mut TrScope) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = registry::lock().new_scope()?.into();
        Ok(())
    })
}

/// Releases every handle the scope owns, closes it, and unlinks it from its thread's stack (out
/// of order too: scopes opened inside it then link to its outer scope). A second dispose, or a
/// dispose of handle 0, is a no-op. Errors: TR_ERR_INVALID_HANDLE for a value that was never a
/// scope handle.
#[no_mangle]
pub extern "C" fn tr_scope_dispose(s: TrScope) -> Status {
    if s.id == 0 {
        return Status::TR_OK;
    }
    call(|| registry::update(|st, freed| st.dispose_scope(s.into(), freed)))
}

/// Releases every handle the scope owns; the scope stays open and keeps capturing.
/// Errors: TR_ERR_SCOPE_DISPOSED, TR_ERR_INVALID_HANDLE.
#[no_mangle]
pub extern "C" fn tr_scope_dispose_everything(s: TrScope) -> Status {
    call(|| registry::update(|st, freed| st.dispose_everything_but(s.into(), &[], freed)))
}

/// Releases every owned handle except the `keep_len` handles in `keep`, which stay owned and
/// die with the scope. Handles in `keep` that the scope does not own are left alone.
/// Errors: TR_ERR_NULL_ARG (`keep` NULL with `keep_len` > 0), TR_ERR_SCOPE_DISPOSED, bad
/// handles in `keep` (then nothing is released).
#[no_mangle]
pub extern "C" fn tr_scope_dispose_everything_but(s: TrScope, keep: *const TrTensor, keep_len: usize) -> Status {
    call(|| {
        let keep = handles_arg(keep, keep_len, "keep")?;
        registry::update(|st, freed| st.dispose_everything_but(s.into(), &keep, freed))
    })
}

/// The scope takes ownership of `t`, from another scope or from the caller.
/// Errors: TR_ERR_SCOPE_DISPOSED, bad handles.
#[no_mangle]
pub extern "C" fn tr_scope_attach(s: TrScope, t: TrTensor) -> Status {
    call(|| registry::lock().attach(s.into(), t.into()))
}

/// If the scope owns `t`, `t` leaves it and belongs to the caller; otherwise nothing changes.
/// Errors: TR_ERR_SCOPE_DISPOSED, bad handles.
#[no_mangle]
pub extern "C" fn tr_scope_detach(s: TrScope, t: TrTensor) -> Status {
    call(|| registry::lock().detach(s.into(), t.into()))
}

/// If the scope owns `t`, hands it to the scope's outer scope (detached if there is none).
/// Errors: TR_ERR_SCOPE_DISPOSED, bad handles.
#[no_mangle]
pub extern "C" fn tr_scope_move_to_outer(s: TrScope, t: TrTensor) -> Status {
    call(|| registry::lock().move_to_outer(t.into(), Some(s.into())))
}

/// Writes whether the scope owns `t` (false for a released `t`).
/// Errors: TR_ERR_NULL_ARG, TR_ERR_SCOPE_DISPOSED, TR_ERR_INVALID_HANDLE.
#[no_mangle]
pub extern "C" fn tr_scope_contains(s: TrScope, t: TrTensor, out: *mut bool) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = registry::lock().contains(s.into(), t.into())?;
        Ok(())
    })
}

/// Writes the number of handles the scope owns. Errors: TR_ERR_NULL_ARG, TR_ERR_SCOPE_DISPOSED.
#[no_mangle]
pub extern "C" fn tr_scope_len(s: TrScope, out: *mut usize) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = registry::lock().scope_len(s.into())?;
        Ok(())
    })
}

/// Writes this thread's current (innermost open) scope, or the handle 0 if none is open.
/// Errors: TR_ERR_NULL_ARG.
#[no_mangle]
pub extern "C" fn tr_scope_current(out: *mut TrScope) -> Status {
    call(|| {
        let out = out_arg(out, "out")?;
        *out = registry::lock().current_scope().map_or(TrScope { id: 0 }, TrScope::from);
        Ok(())
    })
}

/// Hands `t` to the scope that was current when its owning scope was opened; with no outer
/// scope `t` becomes detached. A handle no scope owns is left as it is. Errors: bad handles.
#[no_mangle]
pub extern "C" fn tr_tensor_move_to_outer_scope(t: TrTensor) -> Status {
    call(|| registry::lock().move_to_outer(t.into(), None))
}

/// `t` leaves its owning scope, if any, and belongs to the caller. Errors: bad handles.
#[no_mangle]
pub extern "C" fn tr_tensor_detach_from_scope(t: TrTensor) -> Status {
    call(|| registry::lock().detach_from_scope(t.into()))
}

/// Hands `t` to `target`; the handle 0 detaches it. Moving to its own scope is a no-op.
/// Errors: TR_ERR_SCOPE_DISPOSED (a disposed target: nothing changes), bad handles.
#[no_mangle]
pub extern "C" fn tr_tensor_move_to_scope(t: TrTensor, target: TrScope) -> Status {
    call(|| registry::lock().move_to_scope(t.into(), (target.id != 0).then(|| target.into())))
}

/// Writes this thread's scope statistics. Errors: TR_ERR_NULL_ARG.
#[no_mangle]
pub extern "C" fn tr_scope_stats_get(out: *mut TrStats) -> Status {
    call(|| {
        *out_arg(out, "out")? = Stats::get().into();
        Ok(())
    })
}

/// Zeroes this thread's scope statistics.
#[no_mangle]
pub extern "C" fn tr_scope_stats_reset() -> Status {
    call(|| {
        Stats::reset();
        Ok(())
    })
}

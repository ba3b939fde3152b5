//! What autograd saves for backward, managed like any other storage. Through the engine hooks of
//! src/residency/training/autograd.cpp (which says why that mechanism), each tensor an op saves is handed to
//! `pack`: a device copy of a known storage becomes one more view of it; anything else (a dropout
//! mask, a normalisation's statistics) becomes a new storage, counted against the budget. The
//! saved tensor then holds no device memory of its own: the storage may be evicted (a newer copy
//! is written back asynchronously) and is brought back when backward unpacks it, recorded in the
//! trace as an `unpack` op, so Flow learns the backward order and evicts by next use.
//!
//! An in-place write to a saved tensor is caught at unpack (libtorch skips its own check when
//! hooks hold the data): every copy and view of a storage shares one version counter.

use crate::residency::core::manager::Manager;
use crate::residency::core::storage::Role;
use crate::residency::model::SAVE;
use crate::residency::{active, with};
use crate::error::{Error, Result};
use crate::registry::Entry;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// One saved tensor, as an engine's hooks hold it: ours (below), or a host language's own engine
/// through the C ABI (`tr_saved_pack`, src/ffi/saved.rs).
pub(crate) enum Saved {
    /// Kept as it is (its data: an op's saved result would otherwise hold its own node, which
    /// holds this), and the version of its data when it was saved: a tensor of the `tensorref`
    /// device (already the manager's), or no manager moves data, or it is not on the compute
    /// device.
    Kept { tensor: tch::Tensor, version: u32 },
    /// A view of a managed storage, the version of its data when it was saved, and where the
    /// schedule log stood (which op saved it), if one is kept.
    Managed { entry: Entry, version: u32, logged_at: Option<usize> },
}

impl Manager {
    /// The entry standing for a tensor autograd saves, registering it as a new storage if it is
    /// not a device copy of a known one. None when it is not on the compute device.
    fn save(&mut self, t: &tch::Tensor) -> Result<Option<Entry>> {
        let info = crate::residency::torch_storage::storage(t, self.cuda())?;
        if let Some(&id) = self.by_device.get(&info.id) {
            let entry = Entry::new(self.storages[&id].home.view(t)?);
            self.attach(&entry, id);
            return Ok(Some(entry));
        }
        if t.device() != self.cfg.device.tch() {
            return Ok(None);
        }
        self.add_produced(t, &info, SAVE, &[], None, None, Role::Saved).map(Some)
    }

    /// The device copy of a saved tensor for backward (loaded if it was evicted). It is not held
    /// in use: the node that unpacked it holds its memory while it runs, and the copy is not
    /// evicted while it does (`Storage::held_outside`).
    fn unpack(&mut self, entry: &Entry, logged_at: Option<usize>) -> Result<(tch::Tensor, Vec<std::sync::Arc<crate::residency::Transfer>>)> {
        self.op_begin("unpack");
        let a = self.acquire(entry, false, "unpack")?;
        self.end_op("unpack", &[(a.key, a.bytes)], None, None);
        if let Some(log) = &mut self.schedule {
            log.unpacked(logged_at);
        }
        self.release(a.storage, true);
        Ok((a.view, self.op_finished("unpack")))
    }
}

/// Takes a tensor autograd saves for backward.
pub(crate) fn save(t: tch::Tensor) -> Result<Saved> {
    let version = crate::residency::autograd::version(&t);
    if !t.defined() || crate::residency::torch_storage::on_tensorref_device(&t) {
        return Ok(Saved::Kept { tensor: t, version });
    }
    if active() {
        let saved = crate::residency::with_room(|| {
            with(|m| {
                let entry = m.save(&t)?;
                // Taken after `save`, which may log a step of its own: the index the running op's
                // step will have.
                Ok((entry, m.schedule.as_ref().map(|log| log.position())))
            })
        })?;
        if let (Some(entry), logged_at) = saved {
            return Ok(Saved::Managed { entry, version, logged_at });
        }
    }
    Ok(Saved::Kept { tensor: t.f_detach()?, version })
}

impl Saved {
    /// The saved tensor for backward: its device copy, loaded if it was evicted. Fails as
    /// libtorch does where an in-place write changed it since it was saved (libtorch leaves that
    /// check to the hooks that hold the data).
    pub(crate) fn unpack(&self) -> Result<tch::Tensor> {
        let (entry, version, logged_at) = match self {
            Saved::Kept { tensor, version } => {
                unchanged(tensor, *version)?;
                return Ok(tensor.shallow_clone());
            }
            Saved::Managed { entry, version, logged_at } => (entry, *version, *logged_at),
        };
        unchanged(entry, version)?;
        if !active() {
            // The manager was turned off since: the data is home.
            return Ok(crate::residency::readable(entry)?.shallow_clone());
        }
        // Backward holds its inputs while it waits: several threads in backward at once at a
        // tight budget may wait on one another.
        let (view, owed) = crate::residency::with_room(|| with(|m| m.unpack(entry, logged_at)))?;
        crate::residency::wait_all(owed)?;
        Ok(view)
    }
}

/// Whether `t` is at the version it was saved at: libtorch's own check and words, and its
/// status, as without a manager.
fn unchanged(t: &tch::Tensor, saved: u32) -> Result<()> {
    let now = crate::residency::autograd::version(t);
    if now == saved {
        return Ok(());
    }
    Err(Error::Torch(format!(
        "one of the variables needed for gradient computation has been modified by an inplace operation: \
         [{:?} {:?}] is at version {now}; expected version {saved} instead",
        t.kind(),
        t.size()
    )))
}

/// The engine's pack hook: takes a new `at::Tensor*`; returns a token, or null with a message.
unsafe extern "C" fn pack(tensor: *mut c_void, err: *mut c_char, err_len: usize) -> *mut c_void {
    // SAFETY: the engine hands over a new heap `at::Tensor*` for us to own.
    let t = unsafe { tch::Tensor::from_ptr(tensor.cast()) };
    match catch_unwind(AssertUnwindSafe(|| save(t))) {
        Ok(Ok(saved)) => Box::into_raw(Box::new(saved)).cast(),
        Ok(Err(e)) => {
            crate::shim::write_error(err, err_len, &e.to_string());
            std::ptr::null_mut()
        }
        Err(_) => {
            crate::shim::write_error(err, err_len, "libtensorref panicked while saving a tensor for backward");
            std::ptr::null_mut()
        }
    }
}

/// The engine's unpack hook: writes a new `at::Tensor*` for a token (0), or a message (1).
unsafe extern "C" fn unpack(token: *mut c_void, out: *mut *mut c_void, err: *mut c_char, err_len: usize) -> c_int {
    // SAFETY: `token` came from `pack` and lives until `free`.
    let saved = unsafe { &*token.cast::<Saved>() };
    let message = match catch_unwind(AssertUnwindSafe(|| saved.unpack())) {
        Ok(Ok(t)) => {
            // SAFETY: `out` is a valid out pointer; the engine takes ownership of the tensor.
            unsafe { *out = std::mem::ManuallyDrop::new(t).as_mut_ptr().cast() };
            return 0;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "libtensorref panicked while unpacking a saved tensor".to_string(),
    };
    crate::shim::write_error(err, err_len, &message);
    1
}

/// The engine's free hook: drops a token (its entry, so the storage is forgotten with its last
/// view).
unsafe extern "C" fn free(token: *mut c_void) {
    // SAFETY: `token` came from `pack` and is freed once.
    let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(token.cast::<Saved>()) })));
}

/// Turns the managing of saved tensors on or off (not where PyTorch's Python engine runs
/// backward: `residency::saved_tensors_managed` says which).
pub(crate) fn manage(on: bool) -> Result<()> {
    Ok(crate::residency::autograd::manage_saved(pack, unpack, free, on)?)
}

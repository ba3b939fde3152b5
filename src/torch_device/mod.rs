//! The `tensorref` device in libtorch's dispatcher: ordinary `at::Tensor`s (and `torch.Tensor`s)
//! whose storages are the residency manager's, so that a model nobody wrote for this library
//! runs under its budget unchanged.
//!
//! The C++ half (`device.cpp`: the backend's registration, allocator and guard; `kernels.cpp`:
//! the kernels a backend must have of its own and the boxed fallback every other aten op
//! reaches) calls back into this file through `Callbacks`, which reach the manager through its
//! one interface, `Ticket`, and two questions beside it (`residency::knows`: whether the manager
//! holds a storage; `residency::cuda_index`: where it computes):
//!
//! * A `tensorref` storage is one manager storage. Its `DataPtr`'s context is the storage's host
//!   home, an `Arc<Entry>` over a host tensor (`adopt`, `release`); its data pointer is that same
//!   context, which names the storage (two tensors share a storage exactly when their data
//!   pointers are equal) but is not its bytes: they live wherever the manager put them.
//! * `run` runs one op: `with_room` around attempts that each take a `Ticket`, acquire every
//!   input's device copy (`acquire`: an alias of the copy with the input's geometry, on the
//!   manager's compute device), make room for the outputs where the compute device's kernels
//!   allocate without asking (`reserve`, CUDA), run the compute device's own kernel over them
//!   (`kernel`), and place what the kernel made (`place`: each result a new managed storage, with
//!   a recipe where the manager recomputes and the op can run again: `replay`) or `end`.
//! * A copy into a storage the manager does not hold yet (`model.to("tensorref")`) writes its home
//!   directly (`unheld_home`): the device is not involved.
//! * With no manager configured an op runs over the homes themselves, on the host.

use crate::error::{Error, Result};
use crate::registry::Entry;
use crate::residency::{torch_storage, IdMap, Ticket};
use replay::RecipeIn;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

mod replay;

/// What the C++ half calls. Every function returns 0, or 1 with the error kept for `run`
/// (`failed`); none lets a panic out. `run` returns 4 when the device or its budget had no room
/// (libtorch's OutOfMemoryError, `torch.OutOfMemoryError` in Python), else 1 with the message.
#[repr(C)]
pub(crate) struct Callbacks {
    run: extern "C" fn(op: *const c_char, attempt: Attempt, ctx: *mut c_void, err: *mut c_char, len: usize) -> c_int,
    acquire: extern "C" fn(ticket: *mut Ticket, home: *const Entry, like: *const c_void, write: c_int, out: *mut *mut c_void) -> c_int,
    kernel: extern "C" fn(ticket: *mut Ticket, body: Body, ctx: *mut c_void) -> c_int,
    recomputes: extern "C" fn(ticket: *mut Ticket) -> c_int,
    reserves: extern "C" fn(ticket: *mut Ticket) -> c_int,
    reserve: extern "C" fn(ticket: *mut Ticket, bytes: u64) -> c_int,
    place: extern "C" fn(ticket: *mut Ticket, results: *const *const c_void, n: usize, recipe: *const RecipeIn, homes: *mut *const Entry) -> c_int,
    end: extern "C" fn(ticket: *mut Ticket) -> c_int,
    unheld_home: extern "C" fn(home: *const Entry, like: *const c_void, out: *mut *mut c_void, err: *mut c_char, len: usize) -> c_int,
    adopt: extern "C" fn(host: *mut c_void) -> *const Entry,
    release: extern "C" fn(home: *const Entry),
    accelerator: extern "C" fn() -> c_int,
    list_op_bytes: extern "C" fn() -> u64,
    memory: extern "C" fn(restart_peak: c_int, out: *mut Memory) -> c_int,
}

/// The device's memory as libtorch's allocator interface reports it (`torch.accelerator`'s
/// `memory_allocated`, `max_memory_allocated`, `memory_reserved`, `mem_get_info` ...): the bytes
/// of the manager's device copies now and at most, the compute device's reserved bytes (CUDA's
/// caching allocator; 0 on the simulated device) now and at most, and the budget (0: none). All 0
/// without a manager.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Memory {
    allocated: u64,
    peak_allocated: u64,
    reserved: u64,
    peak_reserved: u64,
    budget: u64,
}

/// One attempt at an op, in C++: given the op's ticket (NULL with no manager), it acquires,
/// runs and places; 0 on success.
type Attempt = extern "C" fn(ctx: *mut c_void, ticket: *mut Ticket) -> c_int;
/// The kernel itself, in C++; 0 on success, else the C++ exception is kept on its side.
type Body = extern "C" fn(ctx: *mut c_void) -> c_int;

extern "C" {
    fn tr_native_torch_device_home(t: *const c_void, home: *mut *const c_void, err: *mut c_char, len: usize) -> c_int;
    fn tr_native_torch_device_tensor(home: *const c_void, like: *const c_void, out_impl: *mut *mut c_void, err: *mut c_char, len: usize) -> c_int;
    fn tr_native_torch_device_tensor_release(tensor_impl: *mut c_void);
    fn tr_native_torch_device_register(callbacks: *const Callbacks, err: *mut c_char, len: usize) -> c_int;
}

static CALLBACKS: Callbacks =
    Callbacks { run, acquire, kernel, recomputes, reserves, reserve, place, end, unheld_home, adopt, release, accelerator, list_op_bytes, memory };

/// Registers the `tensorref` backend with libtorch (once per process; later calls return the
/// first call's outcome).
pub fn register() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    let done = DONE.get_or_init(|| {
        // SAFETY: `CALLBACKS` lives for the process.
        crate::shim::run("registering the tensorref device", |err, len| unsafe { tr_native_torch_device_register(&CALLBACKS, err, len) })
            .map_err(|e| e.to_string())
    });
    done.clone().map_err(Error::Torch)
}

/// A tensor of the `tensorref` device over the storage of `entry` (a handle's), with its dtype and
/// geometry, as a new `c10::TensorImpl*` reference the caller owns. The device tensor's storage
/// has `entry` as its home, so the two are one storage of the manager's: each sees the other's
/// writes, and the storage lives while either does.
pub(crate) fn tensor_of(entry: &Arc<Entry>) -> Result<*mut c_void> {
    register()?;
    if entry.device() != tch::Device::Cpu {
        return Err(Error::InvalidArg(format!(
            "a tensor on {:?} cannot be a tensorref tensor: its home must be host memory (configure a residency manager, whose tensors are homes on the host)",
            entry.device()
        )));
    }
    let mut out = std::ptr::null_mut();
    let home = Arc::into_raw(entry.clone()); // the device storage's reference (released by its deleter)
    // SAFETY: `home` is a live reference passed over; the entry's tensor is live for the call.
    crate::shim::run("a tensorref tensor over a handle", |err, len| unsafe {
        tr_native_torch_device_tensor(home.cast(), entry.as_ptr().cast(), &mut out, err, len)
    })?;
    Ok(out)
}

/// Drops the reference to `tensor_impl` that `tensor_of` gave.
///
/// # Safety
/// `tensor_impl` is a live `c10::TensorImpl*` whose reference the caller owns and gives up.
pub(crate) unsafe fn release_tensor(tensor_impl: *mut c_void) {
    // SAFETY: the caller's contract.
    unsafe { tr_native_torch_device_tensor_release(tensor_impl) }
}

/// The entry a handle over the storage of `t` (a tensor of the `tensorref` device) takes: a view
/// of that storage's home with `t`'s geometry, one storage of the manager's with `t`'s.
pub(crate) fn entry_of(t: &tch::Tensor) -> Result<tch::Tensor> {
    if !torch_storage::on_tensorref_device(t) {
        return Err(Error::InvalidArg(format!("a tensor on {:?}, not on the tensorref device", t.device())));
    }
    let mut home: *const c_void = std::ptr::null();
    // SAFETY: `t` is live for the call; the home is borrowed while `t` keeps its storage.
    crate::shim::run("the home of a tensorref tensor", |err, len| unsafe { tr_native_torch_device_home(t.as_ptr().cast(), &mut home, err, len) })?;
    // SAFETY: the home (an `Entry` the C++ half holds) is live while `t` is.
    host_view(unsafe { &*home.cast::<Entry>() }, t)
}

/// A view of a storage's home memory as `like`, for code that reads or writes it on the host,
/// outside the manager: from here on its memory counts as written (see `Entry::fresh`). Every
/// path of this file to a home's memory goes through here; the manager's own (an op under a
/// manager that moves nothing) clears the mark in `Ticket::acquire_as`.
fn host_view(home: &Entry, like: &tch::Tensor) -> Result<tch::Tensor> {
    home.take_fresh();
    crate::residency::torch_storage::view_on(home, like).map_err(Error::from)
}

thread_local! {
    /// The error a callback failed with, for `run` to return as it is (`RoomTaken` must reach
    /// `with_room` unchanged).
    static FAILED: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// Runs a callback's body: 0, or 1 with its error (a panic too) kept in `FAILED`.
fn guarded(f: impl FnOnce() -> Result<()>) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(crate::error::panic_error(p)));
    match result {
        Ok(()) => 0,
        Err(e) => {
            FAILED.with(|f| *f.borrow_mut() = Some(e));
            1
        }
    }
}

fn failed(what: &str) -> Error {
    FAILED.with(|f| f.borrow_mut().take()).unwrap_or_else(|| Error::Torch(format!("{what} failed")))
}

/// Op names as the manager's events and trace keep them (`&'static str`): each distinct name is
/// kept once, found by the address of libtorch's own (which lives as long as the operator).
fn op_name(op: *const c_char) -> &'static str {
    static NAMES: Mutex<Option<IdMap<usize, &'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    names.get_or_insert_with(IdMap::default).entry(op as usize).or_insert_with(|| {
        // SAFETY: the C++ half passes libtorch's NUL-terminated operator name.
        let name = unsafe { CStr::from_ptr(op) }.to_string_lossy().into_owned();
        Box::leak(name.into_boxed_str())
    })
}

extern "C" fn run(op: *const c_char, attempt: Attempt, ctx: *mut c_void, err: *mut c_char, len: usize) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let name = op_name(op);
        crate::residency::with_room(|| {
            let mut retried = false;
            loop {
                let mut ticket = Ticket::begin(name);
                let raw = ticket.as_mut().map_or(std::ptr::null_mut(), |t| t as *mut Ticket);
                let outcome = match attempt(ctx, raw) {
                    0 => Ok(()),
                    _ => Err(failed(name)),
                };
                match (outcome, ticket) {
                    (Err(Error::OutOfMemory(_)), Some(t)) if !retried && t.evict_unused() > 0 => retried = true,
                    (outcome, _) => return outcome,
                }
            }
        })
    }))
    .unwrap_or_else(|p| Err(crate::error::panic_error(p)));
    match result {
        Ok(()) => 0,
        Err(e) => {
            crate::shim::write_error(err, len, &e.to_string());
            match e {
                Error::OutOfMemory(_) | Error::BudgetTooSmall { .. } => 4,
                _ => 1,
            }
        }
    }
}

/// # Safety (all callbacks)
/// The C++ half passes a live ticket (or NULL), live `at::Tensor`s and homes it holds.
extern "C" fn acquire(ticket: *mut Ticket, home: *const Entry, like: *const c_void, write: c_int, out: *mut *mut c_void) -> c_int {
    guarded(|| {
        // SAFETY: see above; `like` is borrowed for the call.
        let (home, like) = unsafe { (&*home, std::mem::ManuallyDrop::new(tch::Tensor::from_ptr(like as *mut _))) };
        let view = match unsafe { ticket.as_mut() } {
            Some(t) => t.acquire_as(home, &like, write != 0)?,
            None => host_view(home, &like)?,
        };
        // SAFETY: `out` is the C++ half's slot; it takes ownership of the new `at::Tensor*`.
        unsafe { *out = std::mem::ManuallyDrop::new(view).as_mut_ptr().cast() };
        Ok(())
    })
}

/// Returns 2 when the kernel itself failed (its C++ exception is the error), 1 when the manager
/// refused it room or failed.
extern "C" fn kernel(ticket: *mut Ticket, body: Body, ctx: *mut c_void) -> c_int {
    let body_failed = std::cell::Cell::new(false);
    let rc = guarded(|| {
        let run = || match body(ctx) {
            0 => Ok(()),
            _ => {
                body_failed.set(true);
                Err(Error::Torch("the kernel failed".into()))
            }
        };
        // SAFETY: see `acquire`.
        match unsafe { ticket.as_ref() } {
            Some(t) => t.kernel(run),
            None => run(),
        }
    });
    match FAILED.with(|f| matches!(&*f.borrow(), Some(Error::Torch(_)))) && body_failed.get() {
        true => {
            FAILED.with(|f| f.borrow_mut().take());
            2
        }
        false => rc,
    }
}

extern "C" fn recomputes(ticket: *mut Ticket) -> c_int {
    // SAFETY: see `acquire`.
    unsafe { ticket.as_ref() }.is_some_and(Ticket::recomputes).into()
}

/// Whether the op should reserve room for its outputs before its kernel (see `reserve`).
extern "C" fn reserves(ticket: *mut Ticket) -> c_int {
    // SAFETY: see `acquire`.
    unsafe { ticket.as_ref() }.is_some_and(Ticket::reserves).into()
}

/// Makes room for `bytes` of outputs the kernel is about to make (their sizes, from the op's meta
/// kernel), where the compute device's kernels allocate without asking the manager (CUDA).
extern "C" fn reserve(ticket: *mut Ticket, bytes: u64) -> c_int {
    // SAFETY: see `acquire`.
    guarded(|| unsafe { ticket.as_mut() }.map_or(Ok(()), |t| t.reserve(bytes)))
}

/// Places `n` results, each with a recipe when `recipe` is not NULL (its replay is taken over
/// whatever happens).
extern "C" fn place(ticket: *mut Ticket, results: *const *const c_void, n: usize, recipe: *const RecipeIn, homes: *mut *const Entry) -> c_int {
    guarded(|| {
        // SAFETY: see `acquire`.
        let mut ticket = unsafe { ticket.as_mut() };
        // SAFETY: `recipe` is NULL or live, its replay handed over.
        let recipes = unsafe { replay::recipes(recipe, n, ticket.as_ref().is_some_and(|t| t.recomputes())) }?;
        // SAFETY: `results` holds `n` live tensors, `homes` room for `n` pointers.
        let results: Vec<tch::Tensor> = unsafe { std::slice::from_raw_parts(results, n) }
            .iter()
            .map(|&r| unsafe { tch::Tensor::from_ptr(r as *mut _) }.shallow_clone_leaked())
            .collect();
        let entries = match ticket.as_mut() {
            Some(t) => t.finish_many(&results, recipes)?,
            None => results.iter().map(|r| Entry::new(r.shallow_clone())).collect(),
        };
        for (i, e) in entries.into_iter().enumerate() {
            unsafe { *homes.add(i) = Arc::into_raw(Arc::new(e)) };
        }
        Ok(())
    })
}

extern "C" fn end(ticket: *mut Ticket) -> c_int {
    // SAFETY: see `acquire`.
    guarded(|| unsafe { ticket.as_mut() }.map_or(Ok(()), Ticket::end))
}

/// The home of a storage the manager does not hold, viewed as `like` (a new `at::Tensor*` in
/// `*out`), or NULL there when it holds it: a copy into an unheld storage (`model.to("tensorref")`)
/// writes its host memory and needs no room on the device. Outside any op: an error's message
/// goes to `err`.
extern "C" fn unheld_home(home: *const Entry, like: *const c_void, out: *mut *mut c_void, err: *mut c_char, len: usize) -> c_int {
    let rc = guarded(|| {
        // SAFETY: see `acquire`.
        let (home, like) = unsafe { (&*home, std::mem::ManuallyDrop::new(tch::Tensor::from_ptr(like as *mut _))) };
        let view = match crate::residency::knows(home)? {
            true => std::ptr::null_mut(),
            false => {
                let view = host_view(home, &like)?;
                std::mem::ManuallyDrop::new(view).as_mut_ptr().cast()
            }
        };
        // SAFETY: `out` is the C++ half's slot; it takes ownership of a new tensor.
        unsafe { *out = view };
        Ok(())
    });
    if rc != 0 {
        crate::shim::write_error(err, len, &failed("reading a home").to_string());
    }
    rc
}

/// A new storage's host memory (ownership passed, never written yet) as its home.
extern "C" fn adopt(host: *mut c_void) -> *const Entry {
    // SAFETY: the C++ half hands over a tensor it allocated with `new`.
    let host = unsafe { tch::Tensor::from_ptr(host as *mut _) };
    Arc::into_raw(Arc::new(Entry::fresh(host)))
}

/// A `tensorref` storage died: its home goes (the manager forgets it with its last view).
extern "C" fn release(home: *const Entry) {
    // SAFETY: `home` came from `Arc::into_raw` in `adopt` or `place`, released once.
    let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Arc::from_raw(home) })));
}

/// The device ops compute on: -1 for the host (no manager, or the simulated device), else the
/// CUDA device's index.
extern "C" fn accelerator() -> c_int {
    crate::residency::cuda_index().map_or(-1, |i| i as c_int)
}

/// The bytes one op over lists of parameters may read (see `residency::list_op_bytes`); 0 where
/// nothing bounds an op.
extern "C" fn list_op_bytes() -> u64 {
    crate::residency::list_op_bytes()
}

/// Writes the device's `Memory`, after starting its peak of allocated bytes again from now when
/// `restart_peak` is not 0; 1 (nothing written) where the manager could not be asked (from its
/// own event callback).
extern "C" fn memory(restart_peak: c_int, out: *mut Memory) -> c_int {
    let filled = catch_unwind(AssertUnwindSafe(|| -> Result<Memory> {
        if restart_peak != 0 {
            crate::residency::restart_peak()?;
        }
        Ok(crate::residency::stats().map_or_else(Memory::default, |s| Memory {
            allocated: s.device_bytes,
            peak_allocated: s.peak_device_bytes,
            reserved: s.reserved_bytes,
            peak_reserved: s.peak_reserved_bytes,
            budget: if s.budget == u64::MAX { 0 } else { s.budget }, // Resident's: none
        }))
    }));
    match filled {
        Ok(Ok(m)) => {
            // SAFETY: `out` is the C++ half's slot for one `Memory`.
            unsafe { out.write(m) };
            0
        }
        _ => 1,
    }
}

/// `tch::Tensor::from_ptr` borrows here: a new handle to the same TensorImpl, the borrowed
/// pointer left to its owner.
trait Borrowed {
    fn shallow_clone_leaked(self) -> tch::Tensor;
}

impl Borrowed for tch::Tensor {
    fn shallow_clone_leaked(self) -> tch::Tensor {
        let t = std::mem::ManuallyDrop::new(self);
        t.shallow_clone()
    }
}

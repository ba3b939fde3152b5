//! What a tensor handle points at: the libtorch tensor and what is known about it. An `Entry`
//! is shared (`Arc`) between the registry slot, every alias of the handle and any op that is
//! using it right now, so an op keeps its inputs alive even if another thread releases them.
//!
//! The tensor is the entry's home copy, in host memory. Once the residency manager has seen the
//! entry (`registered`), the manager may also hold a device copy that is newer than the home
//! copy; code that reads data goes through `ops::data`, which asks the manager.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Where an entry's bytes are: 0 is host memory, `1 + n` is CUDA device `n`.
pub(crate) type DeviceSlot = usize;

/// Every op's result becomes an entry, so nothing is computed here until someone asks: the
/// footprint (five libtorch calls) and the manager's id cost nothing on the unmanaged path.
/// No `Weak<Entry>` is ever made: the registry's spares take a strong count of 1 for sole
/// ownership (spares.rs).
pub(crate) struct Entry {
    tensor: tch::Tensor,
    footprint: OnceLock<(u64, DeviceSlot)>,
    /// The residency manager's storage this entry views, once the manager tracks the entry (it
    /// is then told when the entry dies); 0 before. A storage id is not reused before 2^40 more
    /// storages, not even by a later manager, so one that is not the current manager's is
    /// recognised as stale (src/residency/core/storage_table.rs).
    storage: AtomicU64,
    /// Its memory was never written: a storage the `tensorref` device made (`empty`) that no one
    /// has seen on the host. The manager gives such a storage device memory without loading it.
    fresh: AtomicBool,
    /// The tensor's TensorImpl is the manager's own, an op's view of a device copy or a result's
    /// home, and goes back to the manager when the entry dies (see `on_recycled`).
    recycled: bool,
}

// SAFETY: `tch::Tensor` is `Send` but not `Sync` because it wraps a pointer to a heap
// `at::Tensor`. Every method we call through `&tch::Tensor` hands libtorch a `const at::Tensor&`,
// which is exactly what two threads holding `shallow_clone`s of one TensorImpl do, and tch already
// allows that (shallow clones are `Send`). Mutation of the data (in-place ops) goes through a
// shallow clone too, so an `Entry` never exposes more than a shared TensorImpl already does.
unsafe impl Sync for Entry {}

impl Entry {
    pub(crate) fn new(tensor: tch::Tensor) -> Entry {
        Entry { tensor, footprint: OnceLock::new(), storage: AtomicU64::new(0), fresh: AtomicBool::new(false), recycled: false }
    }

    /// An entry for a tensor whose TensorImpl the manager made and takes back (see `recycled`).
    pub(crate) fn recycled(tensor: tch::Tensor) -> Entry {
        Entry { tensor, footprint: OnceLock::new(), storage: AtomicU64::new(0), fresh: AtomicBool::new(false), recycled: true }
    }

    /// An entry whose memory was never written (see `fresh`).
    pub(crate) fn fresh(tensor: tch::Tensor) -> Entry {
        let entry = Entry::new(tensor);
        entry.fresh.store(true, Ordering::Release);
        entry
    }

    /// Whether its memory was never written, and from now on it counts as written: the caller
    /// either writes it on the host or gives it to the manager, which knows.
    pub(crate) fn take_fresh(&self) -> bool {
        self.fresh.swap(false, Ordering::AcqRel)
    }

    /// Logical bytes: elements times element size (a view counts at its own size).
    pub(crate) fn bytes(&self) -> u64 {
        self.footprint.get_or_init(|| footprint(&self.tensor)).0
    }

    pub(crate) fn device_slot(&self) -> DeviceSlot {
        self.footprint.get_or_init(|| footprint(&self.tensor)).1
    }

    /// The manager's storage this entry views (see `storage`), 0 if none.
    #[inline]
    pub(crate) fn storage(&self) -> u64 {
        self.storage.load(Ordering::Acquire)
    }

    /// Records that the manager tracks this entry as a view of `storage`.
    pub(crate) fn attach(&self, storage: u64) {
        self.storage.store(storage, Ordering::Release);
    }

    pub(crate) fn is_registered(&self) -> bool {
        self.storage() != 0
    }

    /// Moves the tensor out and forgets what was known about it, leaving an empty entry whose
    /// allocation can hold the next one (`refill`). The entry must not be used until then.
    pub(crate) fn empty(&mut self) -> tch::Tensor {
        debug_assert!(!self.is_registered(), "the residency manager still tracks this entry");
        self.footprint.take();
        self.fresh.store(false, Ordering::Release);
        self.recycled = false;
        // SAFETY: a null tensor owns nothing; `at_free(NULL)` would be `delete nullptr`, and
        // `refill` forgets it rather than dropping it anyway. Nothing reads an emptied entry.
        std::mem::replace(&mut self.tensor, unsafe { tch::Tensor::from_ptr(std::ptr::null_mut()) })
    }

    /// Puts a tensor into an emptied entry.
    pub(crate) fn refill(&mut self, tensor: tch::Tensor) {
        std::mem::forget(std::mem::replace(&mut self.tensor, tensor));
    }

    /// Puts a whole entry into an emptied one's place.
    pub(crate) fn put(&mut self, entry: Entry) {
        // An emptied entry owns nothing: its tensor is null and it tells no hook.
        std::mem::forget(std::mem::replace(self, entry));
    }

    /// The entry dies (as it is dropped, or before its allocation takes the next one, `put`):
    /// the residency manager, if it tracks the entry, is told, and its tensor is freed or given
    /// back to the manager (`recycled`), which leaves it emptied.
    pub(crate) fn end(&mut self) {
        if self.is_registered() {
            if let Some(forget) = ON_FORGET.get() {
                forget(self.storage(), &self.tensor);
            }
            *self.storage.get_mut() = 0; // the manager's no longer: `empty` may take its tensor
        }
        let recycled = self.recycled;
        let tensor = self.empty();
        if let (true, Some(done)) = (recycled, ON_RECYCLED.get()) {
            done(tensor);
        }
    }
}

/// Told of every registered entry that dies: its storage and its tensor, still alive. The residency
/// manager installs it (the registry knows nothing above itself); only a manager registers
/// entries, so it is set first.
static ON_FORGET: OnceLock<fn(u64, &tch::Tensor)> = OnceLock::new();

/// Installs the hook told of every registered entry's death (once; later calls keep the first).
pub(crate) fn on_forget(hook: fn(u64, &tch::Tensor)) {
    let _ = ON_FORGET.set(hook);
}

/// Given the tensor of every dying entry whose TensorImpl the residency manager made
/// (`Entry::recycled`): the manager installs it.
static ON_RECYCLED: OnceLock<fn(tch::Tensor)> = OnceLock::new();

/// Installs the hook given every dying recycled tensor (once; later calls keep the first).
pub(crate) fn on_recycled(hook: fn(tch::Tensor)) {
    let _ = ON_RECYCLED.set(hook);
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.end();
    }
}

impl Deref for Entry {
    type Target = tch::Tensor;
    fn deref(&self) -> &tch::Tensor {
        &self.tensor
    }
}

/// Logical bytes (elements x element size; a view counts at its own size) and device slot.
/// Reads libtorch's metadata directly: `Tensor::numel` would allocate a Vec on every op.
pub(crate) fn footprint(t: &tch::Tensor) -> (u64, DeviceSlot) {
    if !t.defined() {
        return (0, 0);
    }
    let p = t.as_ptr() as *mut torch_sys::C_tensor;
    // SAFETY: `p` is a live, defined tensor owned by `t`; these accessors cannot fail on one.
    let (dims, kind, device) = unsafe {
        let n = torch_sys::at_dim(p);
        let mut shape = [0i64; 16];
        let mut heap;
        let dims: &mut [i64] = if n <= shape.len() {
            &mut shape[..n]
        } else {
            heap = vec![0i64; n];
            &mut heap
        };
        torch_sys::at_shape(p, dims.as_mut_ptr());
        (dims.iter().product::<i64>(), torch_sys::at_scalar_type(p), torch_sys::at_device(p))
    };
    let elem = match crate::dtype::DType::from_code(kind) {
        Ok(d) => d.size(),
        Err(_) => t.f_kind().map_or(0, |k| k.elt_size_in_bytes()),
    };
    (dims as u64 * elem as u64, (device + 1).max(0) as DeviceSlot)
}

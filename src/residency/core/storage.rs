//! One storage as the manager sees it: its host home, its device copy, and what the policies
//! need to know about it. Every registered tensor is a view of one storage (a fresh tensor is
//! the whole of its own), so views and aliases share one home, one device copy and one entry in
//! the budget, and a write through any of them is seen through all of them.

use crate::residency::device::{Device, Transfer};
use crate::residency::device::faults::Fault;
use crate::error::Result;
use crate::residency::training::recipe::Recipe;
use crate::residency::policy::flow::trace::TraceKey;
use crate::residency::torch_storage::StorageRef;
use std::sync::Arc;

/// What a storage's home memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Home {
    /// No memory yet: an op's result that has never left the device.
    Lazy,
    /// Memory libtorch's CPU allocator gave; copies from it are synchronous on CUDA.
    Pageable,
    /// Page-locked memory: copies run asynchronously at the link's full speed.
    PageLocked,
    /// Memory code outside the library can reach (a DLPack import or export). Never cached on
    /// the device past the op that uses it, never moved; a write is copied home before the op
    /// returns. Its version counter is not shared with the outside, so only not caching it makes
    /// an outside write visible at the next op, and an outside read see ours.
    External { page_locked: bool },
    /// Already on the compute device (a CUDA tensor under a CUDA manager): used in place,
    /// never copied, and not counted against the budget (the manager cannot move it).
    OnDevice,
}

impl Home {
    /// Copies to and from it are synchronous, slow ones on CUDA.
    pub(crate) fn pageable(self) -> bool {
        matches!(self, Home::Pageable | Home::External { page_locked: false })
    }
}

/// What a storage holds, as the memory picture stacks it (`picture`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Made outside any op and handed to the manager (weights, a batch's inputs), or made by an
    /// op from nothing (`zeros_like`, `empty`: a creation's result starts in host memory), which
    /// is where an optimizer's state and the device's gradients begin.
    Weights,
    /// An op's result, in the iteration that made it.
    Activations,
    /// A tensor autograd saved for backward (through the saved-tensor hooks).
    Saved,
    /// A parameter's gradient.
    Gradients,
    /// A result that outlived the iteration that made it: optimizer state, a cache.
    State,
}

impl Role {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Weights => "weights and inputs",
            Role::Activations => "activations",
            Role::Saved => "saved for backward",
            Role::Gradients => "gradients",
            Role::State => "state across iterations",
        }
    }
}

/// The device bytes of the storages of each role.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ByRole(pub(crate) [u64; 5]);

impl ByRole {
    pub(crate) fn add(&mut self, role: Role, bytes: u64) {
        self.0[role as usize] += bytes;
    }
    pub(crate) fn sub(&mut self, role: Role, bytes: u64) {
        self.0[role as usize] -= bytes;
    }
}

/// In C order, the fields every op that uses the storage reads first, so that they share the
/// table slot's first cache lines (storage_table.rs): an op's inputs are often storages no cache
/// holds.
#[repr(C)]
pub(crate) struct Storage {
    /// The device copy's StorageImpl; its id is how a view an op makes is recognised.
    pub(crate) device: Option<StorageRef>,
    /// While an op uses it: the external storage whose device copy this one's views, its bytes
    /// lying inside that one's (see `external`). Such a view is not counted: its bytes are the
    /// other's.
    pub(crate) within: Option<u64>,
    pub(crate) bytes: u64,
    pub(crate) last_use: u64,
    pub(crate) uses: u64,
    pub(crate) key: TraceKey,
    /// Running ops using the device copy; such a copy is never evicted.
    pub(crate) in_use: u32,
    pub(crate) kind: Home,
    /// The device copy is newer than the home.
    pub(crate) dirty: bool,
    /// An op wrote the device copy since it was loaded (a write-back of a copy nobody
    /// modified would be wasted; `needless_write_backs` counts them).
    pub(crate) modified: bool,
    pub(crate) pinned: bool,
    /// Brought by a prefetch and not used since.
    pub(crate) prefetched: bool,
    /// Written back ahead of the eviction the followed iteration made (`Manager::write_ahead`),
    /// and on the device since.
    pub(crate) written_ahead: bool,
    /// Its memory was never written (a storage the `tensorref` device made): brought to the
    /// device, it gets memory there and nothing is loaded.
    pub(crate) fresh: bool,
    pub(crate) role: Role,
    /// A load into `device` still running.
    pub(crate) loading: Option<Transfer>,
    /// `device` was loaded on a side stream and an op has read it on the compute stream since.
    /// Once let go of, its memory is reused only when the device is past that use (see
    /// `device::freeing`).
    pub(crate) read_on_compute: bool,
    /// A write-back has read `device` (on the write-back stream): the same holds of that use.
    pub(crate) written_home: bool,
    /// The home StorageImpl, which every host view of the storage shares; its id is how the
    /// manager finds the storage of a tensor.
    pub(crate) home: StorageRef,
    /// A write-back into `home` still running: the home may not be read before it ends.
    pub(crate) writing: Option<Arc<Transfer>>,
    /// Registered entries viewing it.
    pub(crate) views: u32,
    /// Registered views that recipes hold (when all its views are, no one but a remake needs
    /// its data).
    pub(crate) recipe_holds: u32,
    /// How to make it again, for a result that may be dropped rather than written back
    /// (see `recompute`).
    pub(crate) recipe: Option<Arc<Recipe>>,
}

impl Storage {
    pub(crate) fn new(home: StorageRef, kind: Home, bytes: u64, key: TraceKey) -> Storage {
        Storage {
            home,
            kind,
            device: None,
            dirty: false,
            modified: false,
            bytes,
            last_use: 0,
            uses: 0,
            in_use: 0,
            pinned: false,
            prefetched: false,
            written_ahead: false,
            loading: None,
            read_on_compute: false,
            written_home: false,
            writing: None,
            key,
            views: 0,
            recipe: None,
            recipe_holds: 0,
            within: None,
            role: Role::Weights,
            fresh: false,
        }
    }

    /// On the device now (for a storage used in place, always).
    pub(crate) fn resident(&self) -> bool {
        self.device.is_some()
    }

    /// Dropped to be made again: neither on the device nor in a home.
    pub(crate) fn dropped(&self) -> bool {
        self.kind == Home::Lazy && self.device.is_none()
    }

    /// Only recipes hold it: its data is needed only to make a dependent again.
    pub(crate) fn held_by_recipes_only(&self) -> bool {
        self.recipe_holds > 0 && self.views == self.recipe_holds
    }

    /// Counted against the budget while resident.
    pub(crate) fn counted(&self) -> bool {
        self.kind != Home::OnDevice && self.within.is_none()
    }

    /// May be evicted now: no running op holds it, and nothing outside the manager keeps its
    /// device memory alive (evicting it would then free nothing).
    pub(crate) fn evictable(&self) -> bool {
        self.resident() && self.counted() && self.in_use == 0 && !self.pinned && !self.held_outside()
    }

    /// Its device memory is kept alive by more than the manager's copy: a view a backward node
    /// holds (an unpacked saved tensor), or a tensor a running op's kernel holds (one autograd
    /// saved during the op, a batched product's reshaped copy). Asks libtorch (two reference
    /// counts): callers ask it last.
    pub(crate) fn held_outside(&self) -> bool {
        self.device.as_ref().is_some_and(|d| d.holders() > self.own_refs(d.id()))
    }

    /// References this record holds to the StorageImpl at `id`: the home's, and the device
    /// copy's, which are one StorageImpl for a storage used in place (`Home::OnDevice`).
    pub(crate) fn own_refs(&self, id: usize) -> i32 {
        i32::from(self.home.id() == id) + i32::from(self.device_id() == id)
    }

    /// The device copy's StorageImpl address (0 when not on the device).
    pub(crate) fn device_id(&self) -> usize {
        self.device.as_ref().map_or(0, StorageRef::id)
    }

    /// A finished write-back is forgotten; a running one is returned for the caller to wait on.
    pub(crate) fn pending_write(&mut self) -> Option<Arc<Transfer>> {
        if self.writing.as_ref().is_some_and(|w| w.finished()) {
            self.writing = None;
        }
        self.writing.clone()
    }
}

/// Runs a request for page-locked memory on `device`'s host; returns its result and how many new
/// allocations it took (0 when the allocator's cache served it: microseconds on CUDA rather than
/// milliseconds).
pub(in crate::residency) fn page_locked<R>(device: Device, request: impl FnOnce() -> std::result::Result<R, tch::TchError>) -> Result<(R, u64)> {
    device.fault(Fault::PageLockedAllocation, format_args!("allocating page-locked memory"))?;
    let cuda = device.cuda();
    let before = crate::residency::torch_storage::page_locked_allocations(cuda);
    let result = request()?;
    Ok((result, crate::residency::torch_storage::page_locked_allocations(cuda).saturating_sub(before)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A storage used in place keeps its home and its device copy as two references to one
    /// StorageImpl: neither counts as a holder outside the record, and a tensor over it does.
    #[test]
    fn a_storage_used_in_place_counts_both_its_references_as_its_own() {
        let t = tch::Tensor::f_ones([4], tch::kind::FLOAT_CPU).unwrap();
        let mut s = Storage::new(StorageRef::of(&t).unwrap(), Home::OnDevice, 16, TraceKey::Persistent(1));
        s.device = Some(StorageRef::of(&t).unwrap());
        assert_eq!(s.own_refs(s.home.id()), 2);
        assert!(s.held_outside(), "`t` still holds the memory");
        drop(t);
        assert_eq!(s.home.holders(), 2, "only the record's two references are left");
        assert!(!s.held_outside(), "nothing outside the record holds it");
    }

    /// A copy on the device is a StorageImpl of its own: the record holds one reference to each.
    #[test]
    fn a_device_copy_apart_from_its_home_is_held_once_by_the_record() {
        let (home, copy) = (tch::Tensor::f_ones([4], tch::kind::FLOAT_CPU).unwrap(), tch::Tensor::f_ones([4], tch::kind::FLOAT_CPU).unwrap());
        let mut s = Storage::new(StorageRef::of(&home).unwrap(), Home::PageLocked, 16, TraceKey::Persistent(1));
        s.device = Some(StorageRef::of(&copy).unwrap());
        assert_eq!((s.own_refs(s.home.id()), s.own_refs(s.device_id())), (1, 1));
        assert!(s.held_outside(), "`copy` still holds the device memory");
        drop(copy);
        assert!(!s.held_outside());
    }
}

//! The manager's storages, by id. Every managed op looks its inputs up here several times and
//! adds its result, so a lookup is an index: an id names its slot in its low bits. A freed slot
//! is the next one filled, so an op's result lands where the last released result was, in memory
//! the cache still holds, rather than at a random bucket of a map of every storage.
//!
//! An id is a serial in its high bits, taken from one process-wide counter, over the slot: ids
//! grow in the order storages are registered (Flow's trace relies on it), are never 0, and are
//! not reused before 2^40 more storages, by this manager or a later one, so an entry still naming
//! a storage of an earlier manager names none of this one's.

use crate::error::{Error, Result};
use crate::residency::core::storage::Storage;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

const SLOT_BITS: u32 = 24;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// Serials run from 1 to this less 1, then again.
const SERIALS: u64 = 1 << (64 - SLOT_BITS);
/// The most storages one manager tracks at once.
pub(crate) const MAX_STORAGES: usize = 1 << SLOT_BITS;

/// The next storage's serial (see the module's note).
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// The slots' address and count, for `fetch`, which runs without the manager's lock: they change
/// only as the table grows, and a stale pair costs one useless cache fetch (the table of a
/// manager since dropped included).
static SLOTS: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());
static SLOT_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Asks the CPU to fetch the first two cache lines of storage `id`'s slot, which hold what an op
/// reads of it (see `cache_lines`).
#[inline]
pub(crate) fn fetch(id: u64) {
    let slot = slot_of(id);
    if slot < SLOT_COUNT.load(Ordering::Relaxed) {
        crate::residency::core::cache_lines::fetch_lines(SLOTS.load(Ordering::Relaxed).wrapping_add(slot).cast(), 2);
    }
}

/// A slot: its storage and that storage's id, or None while the slot is free. Each starts a
/// cache line, which holds the id and what an op reads of the storage first.
#[repr(align(64))]
struct Slot(Option<(u64, Storage)>);

#[derive(Default)]
pub(crate) struct StorageTable {
    slots: Vec<Slot>,
    /// The free slots, the last freed on top.
    free: Vec<u32>,
}

fn slot_of(id: u64) -> usize {
    (id & SLOT_MASK) as usize
}

impl StorageTable {
    /// Adds the storage `make` builds from its new id, and returns the id; an error when the
    /// table already holds `MAX_STORAGES`.
    pub(crate) fn insert(&mut self, make: impl FnOnce(u64) -> Storage) -> Result<u64> {
        let slot = match self.free.pop() {
            Some(slot) => slot as usize,
            None if self.slots.len() < MAX_STORAGES => {
                self.slots.push(Slot(None));
                SLOTS.store(self.slots.as_mut_ptr(), Ordering::Relaxed);
                SLOT_COUNT.store(self.slots.len(), Ordering::Relaxed);
                self.slots.len() - 1
            }
            None => return Err(Error::Device(format!("the manager tracks at most {MAX_STORAGES} storages at once"))),
        };
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed) % (SERIALS - 1) + 1;
        let id = serial << SLOT_BITS | slot as u64;
        self.slots[slot] = Slot(Some((id, make(id))));
        Ok(id)
    }

    #[inline]
    pub(crate) fn get(&self, id: &u64) -> Option<&Storage> {
        match self.slots.get(slot_of(*id)) {
            Some(Slot(Some((held, s)))) if held == id => Some(s),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: &u64) -> Option<&mut Storage> {
        match self.slots.get_mut(slot_of(*id)) {
            Some(Slot(Some((held, s)))) if held == id => Some(s),
            _ => None,
        }
    }

    #[inline]
    pub(crate) fn contains_key(&self, id: &u64) -> bool {
        self.get(id).is_some()
    }

    /// Takes storage `id` out; its slot is the next filled.
    pub(crate) fn remove(&mut self, id: &u64) -> Option<Storage> {
        let slot = slot_of(*id);
        match self.slots.get(slot) {
            Some(Slot(Some((held, _)))) if held == id => {}
            _ => return None,
        }
        self.free.push(slot as u32);
        self.slots[slot].0.take().map(|(_, s)| s)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&u64, &Storage)> {
        self.slots.iter().filter_map(|slot| slot.0.as_ref()).map(|(id, s)| (id, s))
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&u64, &mut Storage)> {
        self.slots.iter_mut().filter_map(|slot| slot.0.as_mut()).map(|(id, s)| (&*id, s))
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Storage> {
        self.iter().map(|(_, s)| s)
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Storage> {
        self.iter_mut().map(|(_, s)| s)
    }
}

impl std::ops::Index<&u64> for StorageTable {
    type Output = Storage;

    fn index(&self, id: &u64) -> &Storage {
        self.get(id).expect("a storage the manager tracks")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::residency::core::storage::Home;
    use crate::residency::policy::flow::trace::TraceKey;
    use crate::residency::torch_storage::StorageRef;

    fn storage(id: u64) -> Storage {
        let t = tch::Tensor::f_zeros([2], tch::kind::FLOAT_CPU).unwrap();
        let entry = crate::registry::Entry::new(t);
        Storage::new(StorageRef::of(&entry).unwrap(), Home::Pageable, 8, TraceKey::Persistent(id))
    }

    #[test]
    fn a_freed_slot_is_filled_next_under_a_new_larger_id() {
        let mut table = StorageTable::default();
        let a = table.insert(storage).unwrap();
        let b = table.insert(storage).unwrap();
        assert!(b > a, "ids grow in the order storages come");
        assert_eq!(table[&a].key, TraceKey::Persistent(a), "the storage is made with its id");
        assert_eq!(table.remove(&a).map(|s| s.key), Some(TraceKey::Persistent(a)));
        assert!(!table.contains_key(&a) && table.remove(&a).is_none(), "a removed id names nothing");

        let c = table.insert(storage).unwrap();
        assert_eq!(slot_of(c), slot_of(a), "the freed slot is the next filled");
        assert!(c > b && c != a);
        assert!(table.get(&a).is_none(), "the old id does not name the slot's new storage");
        let mut ids: Vec<u64> = table.iter().map(|(&id, _)| id).collect();
        ids.sort();
        assert_eq!(ids, [b, c]);
    }

    #[test]
    fn fetching_any_id_changes_nothing() {
        let mut table = StorageTable::default();
        let a = table.insert(storage).unwrap();
        fetch(a);
        fetch(u64::MAX); // a slot past the table
        assert_eq!(table[&a].key, TraceKey::Persistent(a), "the storage is as it was");
        drop(table);
        fetch(a); // a table since dropped
    }

    #[test]
    fn what_an_op_reads_first_shares_the_slot_s_first_two_cache_lines() {
        use std::mem::offset_of;
        let hot = [offset_of!(Storage, device), offset_of!(Storage, within), offset_of!(Storage, bytes),
                   offset_of!(Storage, last_use), offset_of!(Storage, uses), offset_of!(Storage, key),
                   offset_of!(Storage, in_use), offset_of!(Storage, kind), offset_of!(Storage, prefetched),
                   offset_of!(Storage, loading)];
        // Each starts in the storage's first 96 bytes and is at most 16 long, and the slot puts
        // at most 16 before the storage (the id, Option's tag): all in the slot's first 128.
        assert!(hot.iter().all(|&o| o <= 96), "offsets {hot:?}");
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }
}

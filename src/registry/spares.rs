//! Entry allocations kept for the next entries. Every op's result needs an `Arc<Entry>`, and a
//! handle that dies usually leaves one that nobody else holds, so the next result moves into it,
//! which saves a heap allocation and a free per op (about 130 of the 620 instructions TensorRef
//! added to a small op). Two places keep them:
//! - `Spares`, under the registry lock, for the results of ops without a manager;
//! - each thread, for the entries the residency manager makes outside that lock: the views of
//!   device copies an op reads (`Ticket::acquire`) and managed results (`share`), which come
//!   back when their last holder lets go of them (`retire`).

use super::Entry;
use std::cell::RefCell;
use std::sync::Arc;

const CAP: usize = 256;

/// What a dead handle leaves to drop once the registry lock is released: its tensor, when its
/// entry became a spare, or else the entry itself (shared with an alias or an op in flight, or
/// tracked by the residency manager, or the spares are full).
#[allow(dead_code, reason = "held only to be dropped")]
pub(crate) enum Remains {
    Tensor(tch::Tensor),
    Entry(Arc<Entry>),
}

pub(crate) struct Spares(Vec<Arc<Entry>>);

impl Spares {
    pub(crate) const fn new() -> Spares {
        Spares(Vec::new())
    }

    /// An entry holding `tensor`, in a spare allocation if there is one.
    #[inline]
    pub(crate) fn entry(&mut self, tensor: tch::Tensor) -> Arc<Entry> {
        let Some(mut spare) = self.0.pop() else { return Arc::new(Entry::new(tensor)) };
        match unique(&mut spare) {
            Some(e) => e.refill(tensor),
            None => unreachable!("a spare entry is held only by the spares"),
        }
        spare
    }

    /// Takes a dead handle's entry, keeping its allocation when the entry is not shared.
    #[inline]
    pub(crate) fn reclaim(&mut self, mut entry: Arc<Entry>) -> Remains {
        if self.0.len() < CAP {
            if let Some(e) = unique(&mut entry).filter(|e| !e.is_registered()) {
                let tensor = e.empty();
                self.0.push(entry);
                return Remains::Tensor(tensor);
            }
        }
        Remains::Entry(entry)
    }
}

/// Entries a thread keeps at most: an op holds one per input and result.
const THREAD_CAP: usize = 16;

thread_local! {
    static KEPT: RefCell<Vec<Arc<Entry>>> = const { RefCell::new(Vec::new()) };
}

/// `entry`, shared, in an allocation this thread kept if there is one.
pub(crate) fn share(entry: Entry) -> Arc<Entry> {
    let Some(mut spare) = KEPT.try_with(|k| k.borrow_mut().pop()).ok().flatten() else { return Arc::new(entry) };
    match unique(&mut spare) {
        Some(e) => e.put(entry),
        None => unreachable!("a kept entry is held only by its thread's list"),
    }
    spare
}

/// Lets go of an entry made by `share` (or any other): if this was its last reference, it
/// ends as a drop would end it (see `Entry::end`) and this thread keeps its allocation.
pub(crate) fn retire(mut entry: Arc<Entry>) {
    let Some(e) = unique(&mut entry) else { return };
    e.end();
    let _ = KEPT.try_with(|k| {
        let mut k = k.borrow_mut();
        if k.len() < THREAD_CAP {
            k.push(entry);
        }
    });
}

/// The entry, if `entry` is its only reference. `Arc::get_mut` would say the same with an atomic
/// exchange on the weak count, to exclude a `Weak` being upgraded meanwhile; no `Weak<Entry>` is
/// ever made, so one plain load of the strong count decides (two atomics fewer an op).
#[inline]
fn unique(entry: &mut Arc<Entry>) -> Option<&mut Entry> {
    if Arc::strong_count(entry) != 1 {
        return None;
    }
    // Sees whatever the other holders did before they dropped their references (each drop is a
    // release decrement).
    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
    // SAFETY: `entry` is the only reference and no `Weak` exists, so nothing else can reach the
    // entry while the returned borrow of `entry` lives (as in `Arc::get_mut`).
    Some(unsafe { &mut *Arc::as_ptr(entry).cast_mut() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(n: i64, value: f64) -> tch::Tensor {
        tch::Tensor::f_full([n], value, tch::kind::FLOAT_CPU).unwrap()
    }

    #[test]
    fn a_dead_unshared_entry_holds_the_next_tensor() {
        let mut spares = Spares::new();
        let first = spares.entry(filled(4, 1.0));
        assert_eq!(first.bytes(), 16);
        let allocation = Arc::as_ptr(&first);
        let Remains::Tensor(tensor) = spares.reclaim(first) else { panic!("an unshared entry becomes a spare") };
        assert_eq!(tensor.f_sum(tch::Kind::Float).unwrap().double_value(&[]), 4.0, "the tensor leaves intact");

        let second = spares.entry(filled(3, 2.0));
        assert_eq!(Arc::as_ptr(&second), allocation, "the allocation is reused");
        assert_eq!(second.f_sum(tch::Kind::Float).unwrap().double_value(&[]), 6.0);
        assert_eq!(second.bytes(), 12, "the footprint is the new tensor's");
        assert!(!second.is_registered(), "the reused entry views no manager's storage");
    }

    #[test]
    fn shared_or_managed_entries_are_left_alone() {
        let mut spares = Spares::new();
        let shared = spares.entry(filled(2, 1.0));
        let alias = shared.clone();
        assert!(matches!(spares.reclaim(shared), Remains::Entry(_)));
        assert_eq!(alias.f_sum(tch::Kind::Float).unwrap().double_value(&[]), 2.0, "the alias still reads its data");

        let managed = Arc::new(Entry::new(filled(2, 1.0)));
        managed.attach(1);
        assert!(matches!(spares.reclaim(managed), Remains::Entry(_)));
        assert!(spares.0.is_empty());
    }
}

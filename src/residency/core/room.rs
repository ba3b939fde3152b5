//! Waiting for room that other running ops hold. Ops on several threads share one budget: an op
//! whose inputs and result fit the budget by themselves, but not beside what other running ops
//! hold, gets `Error::RoomTaken` (see `Manager::make_room`), lets go of everything it holds, and
//! runs again from the start once room is freed (`with_room`, which every op runs in). Holding
//! nothing while it waits, no op can wait on another that waits on it.
//!
//! Waiters queue in order: only the first tries again when room is freed, and an op that starts
//! while others wait queues behind them, so that a large op is not starved by small ones and a
//! free wakes one retry, not every waiter's.
//!
//! An op finishes (lets go of its inputs, ends) once its attempt has returned (`finish_op`): only
//! then are its own views of the device copies gone, so that evicting one frees its memory.

use crate::error::{Error, Result};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// Bumped whenever room may have been freed: an op let go of a storage, a storage was forgotten,
/// a pin ended, a manager was turned off.
static FREED: AtomicU64 = AtomicU64::new(0);
/// The queue: the next place to give, and the place whose op may try now.
static NEXT: AtomicU64 = AtomicU64::new(0);
static SERVING: AtomicU64 = AtomicU64::new(0);
static LOCK: Mutex<()> = Mutex::new(());
static CHANGED: Condvar = Condvar::new();

thread_local! {
    /// This thread is inside an op's attempt (`with_room`).
    static ATTEMPTING: Cell<bool> = const { Cell::new(false) };
    /// The ends of ops on this thread waiting for their attempt to return (see `finish_op`).
    static ENDING: RefCell<Vec<Ending>> = const { RefCell::new(Vec::new()) };
}

/// An op's end: the storages it held, and its name if it ran to its end (rather than giving up).
struct Ending {
    op: Option<&'static str>,
    storages: Held,
}

/// The storages an op holds: a few, kept inline.
pub(crate) type Held = smallvec::SmallVec<[u64; 4]>;

/// The ops an attempt ended: usually one.
type Endings = smallvec::SmallVec<[Ending; 1]>;

/// How long a waiter sleeps at most before it looks again.
const AT_MOST: Duration = Duration::from_millis(20);

/// The count of frees so far (an op that finds no room records it, and waits for a later one).
pub(crate) fn freed_so_far() -> u64 {
    FREED.load(Ordering::SeqCst)
}

fn queued() -> bool {
    NEXT.load(Ordering::SeqCst) != SERVING.load(Ordering::SeqCst)
}

fn wake() {
    let _lock = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    CHANGED.notify_all();
}

/// Room may have been freed: wakes the waiters, if any (an atomic add and a load otherwise).
pub(crate) fn freed() {
    FREED.fetch_add(1, Ordering::SeqCst);
    if queued() {
        wake();
    }
}

/// A place in the queue; the next one's turn comes when it is dropped.
struct Place(u64);

impl Place {
    fn take() -> Place {
        Place(NEXT.fetch_add(1, Ordering::SeqCst))
    }

    /// Waits until it is this place's turn and, with `since`, room has been freed since that
    /// count (or a short while has passed, at its turn: the op then looks again).
    fn wait(&self, since: Option<u64>) {
        let mut lock = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let turn = SERVING.load(Ordering::SeqCst) == self.0;
            if turn && since.map_or(true, |seen| FREED.load(Ordering::SeqCst) != seen) {
                return;
            }
            let (next, timeout) = CHANGED.wait_timeout(lock, AT_MOST).unwrap_or_else(PoisonError::into_inner);
            lock = next;
            if turn && timeout.timed_out() {
                return;
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        SERVING.store(self.0 + 1, Ordering::SeqCst);
        wake();
    }
}

/// Finishes an op: lets go of its holds on `storages` and, if it ran to its end (`op`), ends it
/// (`Manager::op_finished`: its end event, the write-backs it owes, what Flow starts after it).
/// Inside an attempt this waits until the attempt has returned: until then the op's own views of
/// the device copies (its inputs, as its body holds them) are alive, and evicting a copy it lets
/// go of would free nothing yet.
pub(crate) fn finish_op(op: Option<&'static str>, storages: Held) -> Result<()> {
    let ending = Ending { op, storages };
    if ATTEMPTING.with(Cell::get) {
        ENDING.with(|e| e.borrow_mut().push(ending));
        return Ok(());
    }
    finish_all(smallvec::smallvec![ending])
}

/// Finishes ops (see `finish_op`) and waits for the write-backs they owe (memory the outside
/// can reach).
fn finish_all(endings: Endings) -> Result<()> {
    if endings.is_empty() {
        return Ok(());
    }
    let owed = match crate::residency::lock()?.as_mut() {
        Some(m) => {
            let mut owed = Vec::new();
            for Ending { op, storages } in endings {
                // Under a policy that keeps no result, the result leaves before the inputs do
                // (its write-back is the op's last event with its whole working set on the device).
                if let Some(op) = op {
                    m.evict_unkept(op);
                }
                storages.iter().for_each(|&id| m.release(id, op.is_some()));
                owed.extend(match op {
                    Some(op) => m.op_finished(op),
                    None => m.take_owed(),
                });
            }
            owed
        }
        None => return Ok(()), // turned off since: nothing is held any more
    };
    crate::residency::wait_all(owed)
}

/// Runs `attempt`, then finishes the ops it ran (see `finish_op`), also if it panics.
fn attempt_then_finish<R>(attempt: &mut impl FnMut() -> Result<R>) -> Result<R> {
    let from = ENDING.with(|e| e.borrow().len());
    let ended = move || ENDING.with(|e| e.borrow_mut().drain(from..).collect::<Endings>());
    let unwinding = scopeguard::guard((), |()| {
        let _ = finish_all(ended());
    });
    let result = attempt();
    scopeguard::ScopeGuard::into_inner(unwinding);
    match (result, finish_all(ended())) {
        (Ok(_), Err(e)) => Err(e),
        (result, _) => result,
    }
}

/// Runs `attempt`, which holds nothing once it has failed, again each time it found the room it
/// needs held by other running ops, once some is freed and its turn has come. On one thread
/// alone, or with nobody waiting, it runs once.
///
/// Inside another op's attempt (backward bringing back what it saved) the outer op holds its
/// inputs and perhaps the queue's first place: the inner one waits for a free without queueing.
#[inline]
pub(crate) fn with_room<R>(mut attempt: impl FnMut() -> Result<R>) -> Result<R> {
    if !crate::residency::active() {
        return attempt();
    }
    if ATTEMPTING.with(Cell::get) {
        return loop {
            match attempt_then_finish(&mut attempt) {
                Err(Error::RoomTaken { freed, .. }) => wait_for_free(freed),
                other => break other,
            }
        };
    }
    let mut place = None;
    if queued() {
        place.get_or_insert_with(Place::take).wait(None);
    }
    loop {
        let result = {
            ATTEMPTING.with(|a| a.set(true));
            let _attempting = scopeguard::guard((), |()| ATTEMPTING.with(|a| a.set(false)));
            attempt_then_finish(&mut attempt)
        };
        match result {
            Err(Error::RoomTaken { freed, .. }) => place.get_or_insert_with(Place::take).wait(Some(freed)),
            other => return other,
        }
    }
}

/// Waits until room has been freed since `seen`, or a short while.
pub(crate) fn wait_for_free(seen: u64) {
    let lock = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    if FREED.load(Ordering::SeqCst) == seen {
        let _ = CHANGED.wait_timeout(lock, AT_MOST).unwrap_or_else(PoisonError::into_inner);
    }
}

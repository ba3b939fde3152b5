//! Per-thread scope statistics (TorchSharp's `DisposeScopeManager.Statistics`). Counters only
//! grow; `live` is derived. Each event counts on the thread where it happens.

use std::cell::Cell;

/// A snapshot of this thread's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub created_outside_scope: u64,
    pub disposed_outside_scope: u64,
    pub created_in_scope: u64,
    pub disposed_in_scope: u64,
    pub attached_to_scope: u64,
    pub detached_from_scope: u64,
}

thread_local! {
    static STATS: Cell<Stats> = const { Cell::new(Stats {
        created_outside_scope: 0, disposed_outside_scope: 0, created_in_scope: 0,
        disposed_in_scope: 0, attached_to_scope: 0, detached_from_scope: 0,
    }) };
}

impl Stats {
    /// This thread's counters.
    pub fn get() -> Stats {
        STATS.try_with(Cell::get).unwrap_or_default()
    }

    /// Zeroes this thread's counters.
    pub fn reset() {
        let _ = STATS.try_with(|s| s.set(Stats::default()));
    }

    /// Handles created minus handles disposed on this thread, in and outside scopes.
    pub fn live(&self) -> i64 {
        let in_scope = self.created_in_scope as i64 - self.disposed_in_scope as i64;
        in_scope + self.created_outside_scope as i64 - self.disposed_outside_scope as i64
    }
}

/// Updates this thread's counters (silently skipped while the thread is being torn down).
pub(crate) fn count(f: impl FnOnce(&mut Stats)) {
    let _ = STATS.try_with(|cell| {
        let mut s = cell.get();
        f(&mut s);
        cell.set(s);
    });
}

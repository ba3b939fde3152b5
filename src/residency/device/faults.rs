//! Faults injected on the simulated device, for tests: the k-th device allocation, copy or
//! page-locked allocation from now fails, once, as it would on a GPU that ran out of memory or
//! lost a transfer. The manager must report it as the op's status, lose nothing and stay
//! consistent, so that a later op, and turning the manager off, succeed.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a fault makes fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A device copy's memory: a load, an op's result, a result made again.
    DeviceAllocation = 0,
    /// A copy between a home and the device: a load or a write-back.
    Copy = 1,
    /// Page-locked host memory for a home.
    PageLockedAllocation = 2,
}

/// Per kind, how many more of its events pass before one fails (0: none is armed).
static COUNTDOWN: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// Makes the `k`-th event of `kind` from now fail once (k = 1: the next one; 0 disarms it).
/// Only the simulated device's events count. For tests.
pub fn inject_fault(kind: Fault, k: u64) {
    COUNTDOWN[kind as usize].store(k, Ordering::SeqCst);
}

/// Counts one event of `kind`: the error of an injected fault when it is the one armed.
pub(crate) fn check(kind: Fault, what: std::fmt::Arguments<'_>) -> Result<()> {
    let counter = &COUNTDOWN[kind as usize];
    let hit = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) == Ok(1);
    match (hit, kind) {
        (false, _) => Ok(()),
        (true, Fault::Copy) => Err(Error::Device(format!("simulated device: injected fault: {what} failed"))),
        (true, _) => Err(Error::OutOfMemory(format!("simulated device: injected fault: {what} failed"))),
    }
}

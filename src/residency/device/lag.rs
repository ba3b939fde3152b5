//! How far the simulated device runs behind the host, for tests. A GPU runs what the host queued
//! later than the host queues it, and CUDA's caching allocator gives memory that the host let go
//! of to a new allocation only once the device is past its last use (the events `record_stream`
//! leaves). With a lag of `n` ops, memory the manager lets go of while the host runs op `k` is
//! the simulated device's until the host begins op `k + n`, or until the host waits for it, as
//! the manager does where the budget needs that memory (see `freeing`). 0, the default: the
//! simulated device keeps up with the host, and memory let go of is free at once.

use std::sync::atomic::{AtomicU64, Ordering};

static LAG: AtomicU64 = AtomicU64::new(0);

/// Makes the simulated device run `ops` ops behind the host from now on (0: not behind). For
/// tests and benchmarks.
pub fn set_simulated_lag(ops: u64) {
    LAG.store(ops, Ordering::SeqCst);
}

pub(crate) fn simulated_lag() -> u64 {
    LAG.load(Ordering::Relaxed)
}

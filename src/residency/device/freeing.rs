//! Device memory the manager let go of that the device may still be using, counted against the
//! budget until the device is past it (the manager's side: `Manager::free_copy` and
//! `await_freed`, in core/eviction.rs; docs/residency.md, "Memory the device still uses").
//!
//! A GPU runs what the host queued later than the host queues it, and the host may run far ahead.
//! CUDA's caching allocator gives the memory of a tensor freed on the host to a new allocation
//! only once the device has finished the work queued before the free on the streams that used
//! it (`record_stream`): a copy loaded on a side stream and read on the compute stream, and a
//! copy a write-back has read on the write-back stream. Counted as free from the moment the host
//! lets go of it, that memory goes to the next load, which the allocator must serve from new
//! memory, and the budget bounds the manager's books but not the device. So each such copy stays
//! counted here until the device is past it, and a load or a kernel that needs its room waits
//! for that.
//!
//! A kernel's result freed on the host is free at once: the allocator reuses memory in the order
//! of the stream that allocated it. On the simulated device memory let go of is free at once,
//! unless a test makes the device run behind the host (`lag`): then the copy itself stays alive
//! here, so that the simulated allocator's real peak shows what a GPU would hold, until the device
//! has reached it and its room is needed (CUDA's allocator, too, looks at its events as it
//! allocates).

use crate::error::Result;
use crate::residency::device::{lag, Device, Transfer};
use crate::residency::torch_storage::StorageRef;
use smallvec::SmallVec;
use std::collections::VecDeque;

/// The copies let go of that the device may still use, oldest first, and their bytes.
#[derive(Default)]
pub(crate) struct Freeing {
    queue: VecDeque<(u64, Until)>,
    bytes: u64,
}

/// When the device has finished with a copy let go of.
enum Until {
    /// CUDA: once these have finished: the work queued, as the copy was let go of, on each stream
    /// that used it besides the one it was allocated on (as the allocator's own events).
    Finished(SmallVec<[Transfer; 2]>),
    /// The simulated device running behind the host: the copy's memory, the device's until the
    /// host begins op `clock`.
    Op { _memory: StorageRef, clock: u64 },
}

impl Until {
    fn passed(&self, clock: u64) -> bool {
        match self {
            Until::Finished(queued) => queued.iter().all(Transfer::finished),
            Until::Op { clock: at, .. } => clock >= *at,
        }
    }
}

impl Freeing {
    /// Counts `copy` (`bytes`), let go of on `device` while the host runs op `clock`, for as
    /// long as the device may use it. `read_on_compute`: it was loaded on a side stream and read
    /// on the compute stream since; `written_home`: a write-back has read it (on the write-back
    /// stream). Neither: it is free at once. (An event that cannot be recorded leaves the copy
    /// uncounted: the allocator still keeps its memory from reuse until the device is past it.)
    pub(crate) fn push(&mut self, device: Device, copy: StorageRef, bytes: u64, read_on_compute: bool, written_home: bool, clock: u64) {
        if !read_on_compute && !written_home {
            return;
        }
        let until = match device {
            Device::Cuda(n) => {
                let streams = [(read_on_compute, false), (written_home, true)];
                let queued = streams.iter().filter(|(used, _)| *used).map(|&(_, write_back)| Transfer::queued(n, write_back)).collect();
                match queued {
                    Ok(queued) => Until::Finished(queued),
                    Err(_) => return,
                }
            }
            Device::Simulated if lag::simulated_lag() > 0 => Until::Op { _memory: copy, clock: clock + lag::simulated_lag() },
            _ => return,
        };
        self.queue.push_back((bytes, until));
        self.bytes += bytes;
    }

    /// The bytes the device may still be using.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Forgets, in order, the copies the device has finished with by the host's op `clock`,
    /// without waiting.
    pub(crate) fn reclaim(&mut self, clock: u64) {
        while self.queue.front().is_some_and(|(_, until)| until.passed(clock)) {
            let (bytes, _) = self.queue.pop_front().expect("checked above");
            self.bytes -= bytes;
        }
    }

    /// Waits for the device to finish with the oldest copy and forgets it (the simulated device
    /// catches up at once). On an error the copy stays counted.
    pub(crate) fn wait_oldest(&mut self) -> Result<()> {
        let Some((bytes, until)) = self.queue.pop_front() else { return Ok(()) };
        if let Until::Finished(queued) = &until {
            if let Err(e) = queued.iter().try_for_each(Transfer::wait_on_host) {
                self.queue.push_front((bytes, until));
                return Err(e);
            }
        }
        self.bytes -= bytes;
        Ok(())
    }
}

//! What recomputation keeps and knows: the mode (`Recompute`), a result's recipe, and the link's
//! load learned at each mark (`LinkLoad`). The manager's remakes are in `recompute`.

use crate::error::Result;
use crate::registry::Entry;
use std::sync::Arc;
use tensorref_derive::CEnum;

/// Whether the manager drops results it can make again rather than writing them back.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, CEnum)]
#[c_enum(what = "recompute mode")]
pub enum Recompute {
    /// Every evicted result is written back.
    Off = 0,
    /// A result is dropped when remaking it is estimated cheaper than writing it back and
    /// loading it again over the link.
    Cheaper = 1,
    /// Every result that can be made again is dropped when evicted (as activation
    /// checkpointing would, op by op).
    Always = 2,
}

/// How many recipes deep a remake may go.
pub(crate) const MAX_CHAIN: u32 = 8;

/// What `Cheaper` knows of the link's load, learned at each mark: `pressure` is the link's time
/// over the kernels' time in the iteration that ended, had nothing been dropped (its busier
/// direction, a dropped result counted as written back and loaded again, against the kernels the
/// program ran, backward included, at the device's rates; 1 before the first mark). A copy's time is
/// weighed by it: above 1 the link is the bottleneck and every copy delays the step, below 1
/// copies run under the kernels while a remake takes the compute engine's time. Counting drops as
/// copies keeps it from swinging with the drops it leads to.
#[derive(Debug, Clone, Copy)]
pub(in crate::residency) struct LinkLoad {
    pub(in crate::residency) pressure: f64,
    /// The loaded, remade, written-back and dropped bytes counted at the last mark.
    pub(in crate::residency) at_mark: [u64; 4],
}

impl Default for LinkLoad {
    fn default() -> Self {
        LinkLoad { pressure: 1.0, at_mark: [0; 4] }
    }
}

/// An op's replay function: its inputs' device copies (None for an absent optional input) to
/// its result.
pub(crate) type Replay = Arc<dyn Fn(&[Option<&tch::Tensor>]) -> Result<tch::Tensor> + Send + Sync>;

/// How to make a result again.
pub(crate) struct Recipe {
    /// Set by the manager: the op's name.
    pub(crate) op: &'static str,
    /// The op's tensor inputs as the replay function takes them.
    pub(crate) inputs: Vec<Option<Arc<Entry>>>,
    pub(crate) replay: Replay,
    /// Set by the manager: the op's estimated time on the device, in nanoseconds.
    pub(crate) cost_ns: f64,
    /// Set by the manager: each present input's storage and its version when the op ran.
    pub(crate) storages: Vec<(u64, u32)>,
    /// Recipes deep (1: every input is kept data).
    pub(crate) depth: u32,
    /// Set by the manager: the bytes on the device while it runs (`Manager::working_set`).
    pub(crate) working_set: u64,
    /// What its kernel allocated at its peak the first time, result and scratch, as the simulated
    /// device's allocator counted it (0 elsewhere: the result's bytes are used).
    pub(crate) kernel_bytes: u64,
}

impl Recipe {
    pub(crate) fn new(inputs: Vec<Option<Arc<Entry>>>, replay: Replay) -> Recipe {
        Recipe { op: "", inputs, replay, cost_ns: 0.0, storages: Vec::new(), depth: 0, working_set: 0, kernel_bytes: 0 }
    }
}


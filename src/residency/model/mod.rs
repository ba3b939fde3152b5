//! A model of one recorded pass on a GPU, to optimise Flow before one is at hand. The manager
//! logs what it did in a pass (`Log`): each op with the storages it read, and each copy it
//! started with what the copy had to wait for. `replay` runs that log on three engines, a copy
//! engine for each direction at a given bandwidth (the link is full duplex;
//! src/residency/device/cuda.cpp has a side stream for each) and a compute engine at given per-op times, with the
//! dependencies the real device has:
//! - an op starts when the previous op has ended and the loads of its inputs have ended (it waits
//!   only on the copies it needs);
//! - a load starts when the previous load has ended and, if room was made for it by evicting,
//!   when the last op that used the evicted memory has ended (the budget holds on the device too);
//!   a load of a home whose write-back has not ended by then is queued behind the write-backs
//!   on their stream instead, leaving the loads after it free to go;
//! - every load, on whichever stream, runs on the one host-to-device copy engine: at the earliest
//!   time it is ready and the engine is free for its length (a copy another stream issued later
//!   may run in a gap before it), so that the loads of a pass take at least their bytes over the
//!   bandwidth, and no replay beats the bound;
//! - a write-back starts when the previous write-back has ended and after every op issued before
//!   it has ended (its stream waits for the compute stream);
//! - nothing starts before the host issues it: the host issues the steps in order without delay,
//!   except where it read a result (`Step::HostWait`), after which it issues nothing until the op
//!   that made the result has ended. A pass that reads its output (a loss, a checksum) before the
//!   next begins thus exposes the next pass's first loads unless they were issued ahead.
//!
//! A training step's backward kernels are autograd's, not the manager's: what the log sees of
//! them is each saved tensor unpacked, and which op saved it. An unpack stands for the backward
//! of the ops from the one that saved it to the previous unpack's (`Work::Backward`), costed at
//! `BACKWARD_COST` times their forward cost. Results made again (`Work::Remake`) are costed as
//! the op they repeat.
//!
//! The pass is replayed several times back to back, and the time per pass, until every op and
//! copy has ended, is compared with the bound no schedule can beat, max(bytes loaded /
//! bandwidth, bytes written back / bandwidth, compute time), and with the pass as it would run
//! with nothing moved or remade (`Replay::unmanaged`). The replay never beats that bound
//! (tests/residency.rs, `the_schedule_model_never_beats_its_bound`, over random logs).
//!
//! The manager records the log (`pass`); the replay (`replay`) is a tool beside the runtime, for
//! tests, benchmarks and programs (the last iteration's, through the C ABI: `summary`): the
//! runtime decides only with the rates and op costs of `training::costs`.

pub(in crate::residency) mod pass;
mod replay;
mod summary;

pub(crate) use pass::{Log, SAVE};
pub use pass::{Pass, Step, Work};
pub use replay::{replay, Replay};
pub use summary::ScheduleModel;
pub use crate::residency::training::costs::{roofline, Rates, BACKWARD_COST};

//! The compute device the manager places storages on, and the copies between it and host
//! memory. The simulated accelerator is host memory that the manager accounts for as device
//! memory; its loads and write-backs are real (synchronous) copies, so budgets, copies and data
//! integrity are exercised on machines without a GPU, and every place CUDA would wait or copy
//! from pageable memory is counted the same way on both (see `manager`).

pub(super) mod cuda;
pub(super) mod faults;
pub(super) mod freeing;
pub(super) mod lag;
pub(super) mod memory;

use crate::residency::model::Rates;
use faults::Fault;
use memory::{Mode, Scope};
use crate::error::{Error, Result};

/// The alignment libtorch's CPU allocator gives, which a simulated copy keeps of its home.
const ALIGNMENT: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Host memory; nothing moves (the manager only accounts).
    Cpu,
    /// CUDA device `n`.
    Cuda(usize),
    /// Host memory accounted as device memory, with real copies on load and write-back.
    Simulated,
}

/// A copy between a home and the device: still running on one of CUDA's side streams, or
/// finished.
pub(crate) struct Transfer(Option<cuda::Event>);

impl Transfer {
    fn done() -> Transfer {
        Transfer(None)
    }

    /// The end of the work queued so far on the compute stream of CUDA device `n`, or with
    /// `write_back` on its write-back stream.
    pub(crate) fn queued(n: usize, write_back: bool) -> Result<Transfer> {
        cuda::stream_event(n, write_back).map(|e| Transfer(Some(e)))
    }

    /// Makes the ops that read `tensor` wait for the copy, without blocking the host; the wait,
    /// timed, where the copy had not ended yet.
    pub(crate) fn block_compute(&self, tensor: &tch::Tensor) -> Result<Option<cuda::Stall>> {
        self.0.as_ref().map_or(Ok(None), |e| e.block_compute(tensor))
    }

    /// Blocks the host until the copy has ended.
    pub(crate) fn wait_on_host(&self) -> Result<()> {
        self.0.as_ref().map_or(Ok(()), cuda::Event::synchronize)
    }

    /// Whether the copy has ended.
    pub(crate) fn finished(&self) -> bool {
        self.0.as_ref().map_or(true, cuda::Event::done)
    }
}

impl Device {
    /// CUDA device 0 where libtorch sees one, else the simulated accelerator.
    pub fn best_available() -> Device {
        if tch::Cuda::is_available() { Device::Cuda(0) } else { Device::Simulated }
    }

    /// The libtorch device its kernels run on (the host for the simulated device).
    pub fn tch(self) -> tch::Device {
        match self {
            Device::Cuda(n) => tch::Device::Cuda(n),
            Device::Cpu | Device::Simulated => tch::Device::Cpu,
        }
    }

    /// Whether the device has CUDA's page-locked allocator behind it.
    pub(crate) fn cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }

    pub(crate) fn check_available(self) -> Result<()> {
        if let Device::Cuda(n) = self {
            let count = tch::Cuda::device_count() as usize;
            if n >= count {
                return Err(Error::Device(format!("CUDA device {n} requested, {count} available")));
            }
        }
        Ok(())
    }

    /// The rates recomputation prices ops and copies with when the configuration names none:
    /// a CUDA device's measured (`cuda::measure_rates`), the H100 preset elsewhere (the simulated
    /// device makes the choices an H100 would; on the host nothing moves).
    pub(crate) fn rates(self) -> Result<Rates> {
        match self {
            Device::Cuda(n) => cuda::measure_rates(n),
            Device::Cpu | Device::Simulated => Ok(Rates::H100),
        }
    }

    /// An injected fault's error, for an event of `kind` on the simulated device (see `faults`).
    pub(crate) fn fault(self, kind: Fault, what: std::fmt::Arguments<'_>) -> Result<()> {
        match self {
            Device::Simulated => faults::check(kind, what),
            _ => Ok(()),
        }
    }

    /// Device memory for `bytes` bytes never written (a 1-D byte tensor), for `op`.
    pub(crate) fn allocate(self, bytes: u64, op: &str) -> Result<tch::Tensor> {
        self.fault(Fault::DeviceAllocation, format_args!("allocating device memory for `{op}`"))?;
        let _counted = (self == Device::Simulated).then(|| Scope::enter(Mode::Count));
        Ok(tch::Tensor::f_empty([bytes as i64], (tch::Kind::Uint8, self.tch()))?)
    }

    /// A device copy of a home (a 1-D byte tensor), and the copy still running. With `after_write`
    /// (the home's write-back may still be running), the copy follows the write-backs.
    ///
    /// On the simulated device the copy's data keeps the home's alignment: memory of the
    /// outside's may start anywhere, and libtorch's CPU kernels, its matrix products among them,
    /// take other paths and round otherwise on other alignments, so the copy computes as the home
    /// would. The padding before the data is not counted as device memory.
    pub(crate) fn load(self, home: &tch::Tensor, after_write: bool) -> Result<(tch::Tensor, Transfer)> {
        self.fault(Fault::DeviceAllocation, format_args!("allocating a device copy"))?;
        self.fault(Fault::Copy, format_args!("loading a device copy"))?;
        // Asked of the simulated device only: a load on CUDA pays no call into libtorch for it.
        let misaligned = || home.data_ptr() as usize % ALIGNMENT;
        match self {
            Device::Cuda(n) => cuda::load_async(home, n, after_write).map(|(t, e)| (t, Transfer(Some(e)))),
            Device::Simulated if misaligned() > 0 => {
                let _counted = Scope::enter(Mode::Count);
                let pad = misaligned();
                let bytes = home.numel() as u64;
                memory::lead(pad as u64);
                let memory = tch::Tensor::f_empty([pad as i64 + bytes as i64], (tch::Kind::Uint8, tch::Device::Cpu))?;
                let copy = crate::residency::torch_storage::alias_bytes(&memory, pad, bytes)?;
                crate::residency::torch_storage::copy_quiet(&copy, home)?;
                Ok((copy, Transfer::done()))
            }
            _ => {
                let _counted = (self == Device::Simulated).then(|| Scope::enter(Mode::Count));
                Ok((home.f_to_device_(self.tch(), home.f_kind()?, false, true)?, Transfer::done()))
            }
        }
    }

    /// Starts copying a device copy's bytes into its home; the home is readable once the
    /// returned transfer has finished.
    pub(crate) fn write_back(self, device: &tch::Tensor, home: &tch::Tensor) -> Result<Transfer> {
        self.fault(Fault::Copy, format_args!("writing a device copy back"))?;
        match self {
            Device::Cuda(_) => cuda::write_back_async(device, home).map(|e| Transfer(Some(e))),
            _ => {
                crate::residency::torch_storage::copy_quiet(home, device)?;
                Ok(Transfer::done())
            }
        }
    }
}

/// Parses `cpu`, `simulated`, `cuda`, `cuda:N` and `auto` (see `best_available`), as the
/// examples' `--device` option takes them.
impl std::str::FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Device> {
        match s {
            "auto" => Ok(Device::best_available()),
            "cpu" => Ok(Device::Cpu),
            "simulated" => Ok(Device::Simulated),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| Error::InvalidArg(format!("unknown device `{s}`: expected cpu, simulated, cuda, cuda:N or auto"))),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu (nothing moves)"),
            Device::Simulated => write!(f, "simulated accelerator (host memory accounted as device memory)"),
            Device::Cuda(n) => write!(f, "cuda:{n} (of {} CUDA devices libtorch sees)", tch::Cuda::device_count()),
        }
    }
}

//! The compute device the manager places tensors on, and the copies between it and host memory.
//! The simulated accelerator is host memory that the manager accounts for as device memory;
//! its loads and write-backs are real copies, so budgets, copies and data integrity are
//! exercised on machines without a GPU.

use super::cuda::{self, Pending};
use crate::error::{Error, Result};
use tch::{Device, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputeDevice {
    /// Host memory; nothing moves (the manager only accounts).
    Cpu,
    /// CUDA device `n`.
    Cuda(usize),
    /// Host memory accounted as device memory, with real copies on load and write-back.
    Simulated,
}

impl ComputeDevice {
    pub(crate) fn tch(self) -> Device {
        match self {
            ComputeDevice::Cuda(n) => Device::Cuda(n),
            ComputeDevice::Cpu | ComputeDevice::Simulated => Device::Cpu,
        }
    }

    pub(crate) fn check_available(self) -> Result<()> {
        if let ComputeDevice::Cuda(n) = self {
            let count = tch::Cuda::device_count() as usize;
            if n >= count {
                return Err(Error::Device(format!("CUDA device {n} requested, {count} available")));
            }
        }
        Ok(())
    }

    /// A device copy of a host tensor. On CUDA the copy runs on a side stream and is still in
    /// flight: the returned `Pending` must be waited on (`cuda::wait`) before an op reads it.
    pub(crate) fn load(self, host: &Tensor) -> Result<(Tensor, Option<Pending>)> {
        match self {
            ComputeDevice::Cuda(n) => cuda::load_async(host, n).map(|(t, p)| (t, Some(p))),
            _ => Ok((host.f_to_device_(self.tch(), host.f_kind()?, false, true)?, None)),
        }
    }

    /// Copies a device tensor's values into its host home; on return the home is readable.
    pub(crate) fn write_back(self, device: &Tensor, host: &Tensor) -> Result<()> {
        match self {
            ComputeDevice::Cuda(_) => cuda::write_back(device, host),
            _ => Ok(host.shallow_clone().f_copy_(device)?),
        }
    }

    /// An uninitialised host tensor shaped like `like`, with its strides when its layout is
    /// dense (a transpose stays a transpose: later ops then sum in the same order as without a
    /// manager, so results stay bit for bit identical), page-locked when asked and useful.
    pub(crate) fn empty_host(self, like: &Tensor, pin: bool) -> Result<Tensor> {
        let (size, stride, options) = (like.size(), like.stride(), (like.f_kind()?, Device::Cpu));
        let host = match dense(&size, &stride) {
            true => Tensor::f_empty_strided(&size, &stride, options)?,
            false => Tensor::f_empty(&size, options)?,
        };
        self.maybe_pin(host, pin)
    }

    /// Page-locks a host tensor (only meaningful with CUDA, where it makes copies asynchronous).
    pub(crate) fn maybe_pin(self, host: Tensor, pin: bool) -> Result<Tensor> {
        match self {
            ComputeDevice::Cuda(n) if pin && !is_pinned(&host) => Ok(host.f_pin_memory(Device::Cuda(n))?),
            _ => Ok(host),
        }
    }
}

/// Whether the elements exactly fill their span of memory, in some order of dimensions (what
/// libtorch's `preserve_format` keeps).
fn dense(size: &[i64], stride: &[i64]) -> bool {
    let mut dims: Vec<(i64, i64)> = stride.iter().zip(size).filter(|(_, &n)| n != 1).map(|(&s, &n)| (s, n)).collect();
    dims.sort_unstable();
    let mut expected = 1;
    for (s, n) in dims {
        if s != expected {
            return false;
        }
        expected *= n;
    }
    !size.contains(&0)
}

fn is_pinned(t: &Tensor) -> bool {
    t.device() == Device::Cpu && tch::utils::has_cuda() && t.f_is_pinned(Device::Cuda(0)).unwrap_or(false)
}

//! The `tensorref` device in libtorch's dispatcher (src/torch_device).

use super::boundary;
use crate::error::Status;

/// Registers the `tensorref` device with the libtorch this library runs on: afterwards
/// `at::Tensor`s on device `tensorref` (libtorch's PrivateUse1 backend, renamed) are the residency
/// manager's, and every aten op on them runs under it. Idempotent: later calls return the first
/// call's status. Fails with TR_ERR_TORCH when another backend has taken PrivateUse1. Python's
/// `import tensorref` calls it and names the device on the torch side too.
#[no_mangle]
pub extern "C" fn tr_torch_device_register() -> Status {
    boundary::call(crate::torch_device::register)
}

//! Exchange of tensors with other frameworks in the same process.

/// DLPack. Internal: its C functions are exported by `ffi::dlpack`, and the shim's declarations
/// stay out of the header.
/// cbindgen:ignore
pub(crate) mod dlpack;

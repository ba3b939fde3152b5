// libtorch interop for C++ programs that also use ATen: a libtensorref handle as an `at::Tensor`
// of the `tensorref` device, and back. The two are one storage of the residency manager, so ATen
// ops on the tensor run under it (the budget, Flow's learned order, prefetch) and each side sees
// the other's writes. Include after <ATen/ATen.h> (or <torch/torch.h>) of the libtorch the
// library runs on, and link that libtorch; tensorref.hpp alone needs neither.
#pragma once

#include <ATen/ATen.h>

#include "tensorref.hpp"

namespace tr {

/// Registers the `tensorref` device with libtorch (idempotent; to_aten does it too). Tensors made
/// on it with ATen (`at::empty(..., at::Device("tensorref"))`) are the manager's from the start.
inline void register_torch_device() { detail::call(tr_torch_device_register); }

/// The `at::Tensor` of the `tensorref` device over `t`'s storage, with its dtype and geometry.
[[nodiscard]] inline at::Tensor to_aten(const Tensor& t) {
    void* impl = nullptr;
    detail::call(tr_torch_device_tensor, t.raw(), &impl);
    return at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim(static_cast<c10::TensorImpl*>(impl)));
}

/// A new handle (owned by the current scope, or by the caller) over the storage of `t`, a tensor
/// of the `tensorref` device, with its dtype and geometry. Throws tr::Error (TR_ERR_INVALID_ARG)
/// for a tensor of another device.
[[nodiscard]] inline Tensor from_aten(const at::Tensor& t) {
    tr_tensor out{0};
    detail::call(tr_torch_device_handle, static_cast<void*>(t.unsafeGetTensorImpl()), &out);
    return Tensor::adopt(out);
}

}  // namespace tr

// The tensors an IValue holds, for C++ that walks an op's boxed arguments or results (the
// `tensorref` device's kernels, the sizes of an op's outputs before it runs).
#pragma once

#include <ATen/ATen.h>

namespace tr_native {

// Calls `f(tensor)` on every tensor an IValue holds (a tensor, or a list of optional ones), and
// puts back what it returns.
template <typename F> void each_tensor(c10::IValue &v, F &&f) {
    if (v.isTensor()) {
        v = f(v.toTensor());
    } else if (v.isTensorList()) {
        c10::List<at::Tensor> list = v.toTensorList();
        c10::List<at::Tensor> mapped;
        mapped.reserve(list.size());
        for (const at::Tensor &t : list) {
            mapped.push_back(f(t));
        }
        v = std::move(mapped);
    } else if (v.isList() && v.toListRef().size() > 0 && (v.toListRef()[0].isTensor() || v.toListRef()[0].isNone())) {
        c10::List<std::optional<at::Tensor>> mapped;
        for (const c10::IValue &e : v.toListRef()) {
            mapped.push_back(e.isTensor() ? std::optional<at::Tensor>(f(e.toTensor())) : std::nullopt);
        }
        v = std::move(mapped);
    }
}

} // namespace tr_native

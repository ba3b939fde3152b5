// Autograd across the residency manager's copies. Under a manager that moves data an op reads a
// device copy of its input and its result is registered as a host tensor standing for that
// result; neither is the tensor the graph was recorded on. `tr_native_connect_grad` joins them
// with a node that hands the gradient on unchanged, so backward runs through managed tensors as
// through plain ones. No C++ exception leaves this file (see guarded.h).
#include "guarded.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

using tr_native::guarded;

namespace {

using torch::autograd::variable_list;

// The gradient of a copy is the gradient of what it copies. It stays on the device it was
// computed on, except where the receiver expects another: a leaf accumulates its gradient on its
// own device (the host, for a parameter whose home is there).
struct PassGrad : public torch::autograd::Node {
    variable_list apply(variable_list &&grads) override {
        const auto &next = next_edge(0);
        if (!grads[0].defined() || !next.is_valid()) {
            return {grads[0]};
        }
        auto device = next.function->input_metadata(next.input_nr).device();
        return {grads[0].device() == device ? grads[0] : grads[0].to(device)};
    }

    std::string name() const override {
        return "TensorRefPassGrad";
    }
};

} // namespace

extern "C" {

// Makes `to` (a tensor over the same values as `from`: its device copy, or the host tensor
// registered for a device result) pass the gradient it receives on to `from`. `to` takes a
// gradient function and so requires grad; its gradient has `to`'s device, dtype and shape.
int tr_native_connect_grad(const void *to, const void *from, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &t = *static_cast<const at::Tensor *>(to);
        const auto &f = *static_cast<const at::Tensor *>(from);
        TORCH_CHECK(f.requires_grad(), "connect_grad: the source does not require grad");
        TORCH_CHECK(t.sizes() == f.sizes() && t.scalar_type() == f.scalar_type(), "connect_grad: not the same values");
        std::shared_ptr<PassGrad> node(new PassGrad(), torch::autograd::deleteNode);
        node->set_next_edges({torch::autograd::impl::gradient_edge(f)});
        node->add_input_metadata(t);
        torch::autograd::impl::set_gradient_edge(t, {std::move(node), 0});
    });
}

// Makes `to` share `from`'s version counter. Every copy and view of one storage shares one, as
// PyTorch's views of one base do, so autograd notices an in-place write to a tensor it saved
// (an op's input or result) through any of them, on whichever copy.
int tr_native_share_version(const void *to, const void *from, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &f = *static_cast<const at::Tensor *>(from);
        static_cast<const at::Tensor *>(to)->unsafeGetTensorImpl()->set_version_counter(
            f.unsafeGetTensorImpl()->version_counter());
    });
}

// Sets the gradient `t` reports (an optimizer step reads a parameter's gradient from its device
// copy).
int tr_native_set_grad(const void *t, const void *grad, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &target = *static_cast<const at::Tensor *>(t);
        target.mutable_grad() = *static_cast<const at::Tensor *>(grad);
    });
}

} // extern "C"

// Autograd across the residency manager's copies. Under a manager that moves data an op reads a
// device copy of its input and its result is registered as a host tensor standing for that
// result; neither is the tensor the graph was recorded on. `tr_native_connect_grad` joins them
// with a node that hands the gradient on unchanged, so backward runs through managed tensors as
// through plain ones. `tr_native_manage_saved` hands every tensor autograd saves for backward to
// the manager. No C++ exception leaves this file (see guarded.h).
#include "guarded.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>
#include <torch/csrc/autograd/variable.h>

#include <atomic>

using tr_native::guarded;

namespace {

using torch::autograd::variable_list;

// Accumulates a leaf's gradient where the manager keeps it (see tr_native_connect_grad): gets a
// new at::Tensor* for the leaf and one for the gradient; 0, or 1 with a message in `err`.
using AccumulateFn = int (*)(void *leaf, void *grad, char *err, size_t err_len);
std::atomic<AccumulateFn> accumulate_fn{nullptr};

// The gradient of a copy is the gradient of what it copies. It stays on the device it was
// computed on, except where the receiver expects another: a leaf accumulates its gradient on its
// own device (the host, for a parameter whose home is there). A leaf whose gradient the manager
// keeps gets it through `accumulate_fn` instead.
struct PassGrad : public torch::autograd::Node {
    at::Tensor leaf; // defined: the manager keeps this leaf's gradient

    variable_list apply(variable_list &&grads) override {
        if (leaf.defined()) {
            if (grads[0].defined()) {
                char err[512] = {0};
                TORCH_CHECK(accumulate_fn.load()(new at::Tensor(leaf), new at::Tensor(grads[0]), err, sizeof err) == 0, err);
            }
            return {at::Tensor()};
        }
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

// ---------------------------------------------------------------- saved tensors
//
// How: libtorch asks the default autograd engine for hooks each time an op saves a tensor for
// backward (SavedVariable's constructor calls Engine::get_default_saved_variable_hooks). The base
// engine has none; PyTorch's Python engine answers from the hooks `saved_tensors_hooks` pushes,
// which are Python objects. Where the base engine runs backward (Rust, C, C++, .NET, and Python
// that has not imported torch) an engine of ours takes its place, the base engine in every other
// respect, whose hooks hand each saved tensor to the manager (pack) and take it back in backward
// (unpack). Why not the alternatives: at::SavedTensorDefaultHooks
// holds only Python objects; registering hooks on each node's saved variables after the op has no
// C++ API that reaches them; keeping the tensors autograd saves out of the manager leaves them on
// the device, outside the budget, until backward. Where PyTorch's Python engine is already the
// default, it is left alone: the Python binding makes hooks that call tr_saved_pack
// (src/ffi/saved.rs), which python_hooks.cpp pushes on its stack while the library's calls run.

// A saved tensor in the manager's hands: pack gets a new at::Tensor* and returns a token (null on
// an error, with the message in `err`); unpack writes a new at::Tensor* for a token; free drops it.
using PackFn = void *(*)(void *tensor, char *err, size_t err_len);
using UnpackFn = int (*)(void *token, void **out, char *err, size_t err_len);
using FreeFn = void (*)(void *token);

std::atomic<PackFn> pack_fn{nullptr};
std::atomic<UnpackFn> unpack_fn{nullptr};
std::atomic<FreeFn> free_fn{nullptr};
std::atomic<bool> managing{false};
std::atomic<bool> installed{false};

struct ManagedSaved : public torch::autograd::SavedVariableHooks {
    void *token = nullptr;

    void call_pack_hook(const at::Tensor &tensor) override {
        char err[512] = {0};
        token = pack_fn.load()(new at::Tensor(tensor), err, sizeof err);
        TORCH_CHECK(token != nullptr, err);
    }

    at::Tensor call_unpack_hook() override {
        char err[512] = {0};
        void *out = nullptr;
        TORCH_CHECK(unpack_fn.load()(token, &out, err, sizeof err) == 0, err);
        std::unique_ptr<at::Tensor> owned(static_cast<at::Tensor *>(out));
        return std::move(*owned);
    }

    ~ManagedSaved() override {
        if (token != nullptr) {
            free_fn.load()(token);
        }
    }
};

struct ManagingEngine : public torch::autograd::Engine {
    std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
        if (!managing.load(std::memory_order_acquire)) {
            return nullptr;
        }
        return std::make_unique<ManagedSaved>();
    }
};

// Never destroyed: autograd may run until the process ends.
torch::autograd::Engine &managing_engine() {
    static auto *engine = new ManagingEngine();
    return *engine;
}

} // namespace

extern "C" {

// Makes the default autograd engine hand saved tensors to `pack`/`unpack`/`free` while `on`.
// Installs the library's engine the first time `on` is asked, unless another engine than
// libtorch's base one (PyTorch's Python engine) is the default: then nothing changes
// (tr_native_saved_managed says which).
int tr_native_manage_saved(PackFn pack, UnpackFn unpack, FreeFn free, int on, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        auto &current = torch::autograd::Engine::get_default_engine();
        bool ours = installed && &current == &managing_engine();
        if (!ours && on != 0 && &current == &torch::autograd::Engine::get_base_engine()) {
            pack_fn = pack;
            unpack_fn = unpack;
            free_fn = free;
            torch::autograd::set_default_engine_stub(&managing_engine);
            installed = ours = true;
        }
        managing.store(ours && on != 0, std::memory_order_release);
    });
}

// A new at::Tensor* holding one more reference to `impl`, a c10::TensorImpl* of this process's
// libtorch (what torch.Tensor._cdata gives: a tensor PyTorch's engine saves for backward).
int tr_native_tensor_of_impl(void *impl, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        auto ptr = c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim_copy(
            static_cast<c10::TensorImpl *>(impl));
        *out = new at::Tensor(std::move(ptr));
    });
}

// Whether the library's engine hands saved tensors to the manager now: turned on, and still the
// default engine (importing torch afterwards makes PyTorch's the default).
int tr_native_saved_managed(void) {
    return managing.load(std::memory_order_acquire) && &torch::autograd::Engine::get_default_engine() == &managing_engine();
}

// The version of `t`'s data (autograd's version counter, bumped by every in-place write); 0 for
// a tensor made in inference mode, which has no counter (reading it would throw).
uint32_t tr_native_version(const void *t) {
    const auto &counter = static_cast<const at::Tensor *>(t)->unsafeGetTensorImpl()->version_counter();
    return counter.enabled() ? counter.current_version() : 0;
}

// Makes `to` (a tensor over the same values as `from`: its device copy, or the host tensor
// registered for a device result) pass the gradient it receives on to `from`. `to` takes a
// gradient function and so requires grad; its gradient has `to`'s dtype and shape, on the device
// of whichever of the two is not on the host. With
// `managed_leaf` (`from` is a leaf), the gradient goes to `accumulate` rather than to the leaf's
// own accumulator: the manager keeps leaf gradients as storages of its own.
int tr_native_connect_grad(const void *to, const void *from, AccumulateFn accumulate, int managed_leaf, char *err,
                           size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &t = *static_cast<const at::Tensor *>(to);
        const auto &f = *static_cast<const at::Tensor *>(from);
        TORCH_CHECK(f.requires_grad(), "connect_grad: the source does not require grad");
        TORCH_CHECK(t.sizes() == f.sizes() && t.scalar_type() == f.scalar_type(), "connect_grad: not the same values");
        std::shared_ptr<PassGrad> node(new PassGrad(), torch::autograd::deleteNode);
        if (managed_leaf != 0) {
            TORCH_CHECK(f.is_leaf(), "connect_grad: the source is not a leaf");
            accumulate_fn = accumulate;
            node->leaf = f;
        }
        node->set_next_edges({managed_leaf != 0 ? torch::autograd::Edge() : torch::autograd::impl::gradient_edge(f)});
        // The gradient `to` receives is expected where it is computed: on the compute device,
        // also for a host tensor standing for a device result. (Expected on the host, every
        // gradient between two managed ops crossed the link twice, synchronously: 39x PyTorch's
        // step for a BERT-base encoder on an H200.)
        node->add_input_metadata(t.device().is_cpu() && !f.device().is_cpu() ? f : t);
        torch::autograd::impl::set_gradient_edge(t, {std::move(node), 0});
    });
}

// Makes `to` share `from`'s version counter. Every copy and view of one storage shares one, as
// PyTorch's views of one base do, so autograd notices an in-place write to a tensor it saved
// (an op's input or result) through any of them, on whichever copy.
int tr_native_share_version(const void *to, const void *from, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &f = *static_cast<const at::Tensor *>(from);
        const auto &t = *static_cast<const at::Tensor *>(to);
        if (!t.is_inference() && !f.is_inference()) { // a tensor made under inference mode has no counter
            t.unsafeGetTensorImpl()->set_version_counter(f.unsafeGetTensorImpl()->version_counter());
        }
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

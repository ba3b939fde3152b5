// The `tensorref` device's kernels. Every aten op without a kernel of its own here reaches the
// boxed fallback, which runs it under the manager: each input's device copy acquired, the
// compute device's own kernel over them (no copy of data in the fallback), each new output a
// managed storage. What needs kernels of its own: making tensors (a storage never written has
// nothing to load), views (a view never loads its storage), copies between devices, resizing,
// `set_`, whether two tensors can share a TensorImpl's type (`Module._apply` keeps a parameter's
// identity when they can), and ops over lists of parameters (fused and foreach optimizer steps),
// which run in chunks under a budget.
#include "device.h"
#include "../residency/core/op_views.h"
#include "../residency/core/outputs.h"

#include <ATen/CPUFunctions.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/native/TensorShape.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace tr_device {
namespace {

constexpr c10::DispatchKeySet kKeys{c10::DispatchKey::PrivateUse1};

void check_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
    TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, "the tensorref device holds strided tensors only");
    TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "pin_memory is for host tensors, not tensorref ones");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                               std::optional<c10::Device>, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
    check_options(layout, pin_memory);
    return at::detail::empty_generic(size, allocator(), kKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device>, std::optional<bool> pin_memory) {
    check_options(layout, pin_memory);
    return at::detail::empty_strided_generic(size, stride, allocator(), kKeys, c10::dtype_or_default(dtype));
}

// The device the kernels run on: the manager's CUDA device, or the host (the simulated device).
c10::Device compute_device() {
    const int cuda = callbacks->accelerator();
    return cuda < 0 ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda));
}

// A tensor of `device` with the geometry and dtype of `like` and no memory, its dispatch keys the
// device's and `extra`.
at::Tensor memoryless(const at::Tensor &like, c10::Device device, c10::DispatchKeySet extra) {
    c10::Storage none(c10::Storage::use_byte_size_t(), like.storage().nbytes(), c10::DataPtr(nullptr, device), nullptr, false);
    const auto key = c10::computeDispatchKey(like.scalar_type(), like.layout(), device);
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(none), c10::DispatchKeySet(key) | extra, like.dtype());
    t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
    return t;
}

// Zeros with no memory (libtorch's ZeroTensor: forward-mode AD's tangents, which `torch.func`'s
// jvp, jacfwd and hessian make), as CUDA makes them: ops read them as zeros without loading
// anything, their views are ZeroTensors too, and the fallback hands them to the compute device's
// kernel as ZeroTensors of that device (`push_arguments`).
constexpr c10::DispatchKeySet kZero{c10::DispatchKey::ZeroTensor};

at::Tensor efficient_zero_tensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                                 std::optional<c10::Device>, std::optional<bool> pin_memory) {
    check_options(layout, pin_memory);
    static at::native::ZeroTensorAllocator none(c10::Device(kDevice, 0)); // the storage keeps its address
    return at::detail::empty_generic(size, &none, kKeys | kZero, c10::dtype_or_default(dtype), std::nullopt);
}

at::Tensor as_strided(const at::Tensor &self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
    return at::cpu::as_strided_symint(self, size, stride, std::move(storage_offset));
}

at::Tensor view(const at::Tensor &self, c10::SymIntArrayRef size) {
    return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor &self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
    return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

// A copy into, out of, or within the device, as one op: the destination's device copy written.
// Into a storage the manager does not hold yet (`model.to("tensorref")`), the copy writes its
// host home, and the device is not involved.
at::Tensor copy_from(const at::Tensor &self, const at::Tensor &dst, bool non_blocking) {
    if (ours(dst) && !ours(self)) {
        at::Tensor home = unheld_home(dst);
        if (home.defined()) {
            home.copy_(self);
            return dst;
        }
    }
    run("aten::copy_", [&](Attempt &a) {
        if (ours(dst)) {
            a.writes(dst);
        }
        at::Tensor src = ours(self) ? a.acquire(self) : self;
        at::Tensor out = ours(dst) ? a.acquire(dst) : dst;
        a.kernel([&] { out.copy_(src, non_blocking); });
        a.end();
    });
    return dst;
}

// A 1-D byte tensor of this device over the first `n` bytes of `storage`.
at::Tensor bytes_of(c10::Storage storage, int64_t n) {
    auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), kKeys, caffe2::TypeMeta::Make<uint8_t>());
    t.unsafeGetTensorImpl()->set_sizes_contiguous({n});
    return t;
}

// resize_, as libtorch's: a tensor of the size it has keeps its strides; a storage that must grow
// takes new memory (a new home that starts with the old bytes), and every tensor over it sees it.
const at::Tensor &resize(const at::Tensor &self, c10::SymIntArrayRef size, std::optional<c10::MemoryFormat> memory_format) {
    auto *impl = self.unsafeGetTensorImpl();
    TORCH_CHECK(memory_format != c10::MemoryFormat::Preserve, "resize_: Preserve is not a memory format to resize to");
    if (self.sym_sizes() != size) {
        impl->set_sizes_contiguous(C10_AS_INTARRAYREF_SLOW(size));
    }
    if (memory_format.has_value()) {
        impl->empty_tensor_restride(*memory_format);
    }
    const size_t had = self.storage().nbytes();
    const size_t needed = at::detail::computeStorageNbytes(impl->sizes(), impl->strides(), self.dtype().itemsize(),
                                                           impl->storage_offset());
    if (needed > had) {
        c10::Storage fresh =
            at::detail::empty_generic({static_cast<int64_t>(needed)}, allocator(), kKeys, at::kByte, std::nullopt).storage();
        if (had > 0) {
            copy_from(bytes_of(self.storage(), static_cast<int64_t>(had)), bytes_of(fresh, static_cast<int64_t>(had)), false);
        }
        grow(self.storage(), fresh);
    }
    return self;
}

at::Tensor copy_from_and_resize(const at::Tensor &self, const at::Tensor &dst) {
    if (ours(dst)) {
        resize(dst, self.sym_sizes(), std::nullopt);
    } else {
        dst.resize_(self.sizes());
    }
    return copy_from(self, dst, false);
}

at::Tensor &set_storage(at::Tensor &self, c10::Storage source, int64_t offset, c10::IntArrayRef size, c10::IntArrayRef stride) {
    TORCH_CHECK(source.device().type() == kDevice, "set_: a tensorref tensor takes a tensorref storage, not a ", source.device().type(),
                " one");
    const size_t needed = at::detail::computeStorageNbytes(size, stride, self.dtype().itemsize(), offset);
    TORCH_CHECK(needed <= source.nbytes(), "set_: the view needs ", needed, " bytes, the storage has ", source.nbytes());
    auto *impl = self.unsafeGetTensorImpl();
    impl->set_storage_keep_dtype(std::move(source));
    impl->set_sizes_and_strides(size, stride, offset);
    return self;
}

at::Tensor &set_tensor(at::Tensor &self, const at::Tensor &source) {
    return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor &set_whole_storage(at::Tensor &self, c10::Storage source) {
    const int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
    return set_storage(self, std::move(source), 0, {n}, {1});
}

at::Tensor &set_empty(at::Tensor &self) {
    return set_storage(self, at::detail::empty_generic({0}, allocator(), kKeys, self.scalar_type(), std::nullopt).storage(), 0, {0}, {1});
}

bool shallow_copy_compatible(const at::Tensor &self, const at::Tensor &from) {
    auto dense = [](const at::Tensor &t) { return t.layout() == c10::kStrided && !t.is_nested() && (ours(t) || t.is_cpu() || t.is_cuda()); };
    return dense(self) && dense(from);
}

// ----------------------------------------------------------------------------- the fallback

struct Input {
    at::Tensor tensor;    // the op's argument, of this device
    at::Tensor view;      // its device copy, as the kernel sees it (a ZeroTensor of the compute
                          // device for one of this device)
    const void *memory;   // where the view's memory was before the kernel
};
using Inputs = c10::SmallVector<Input, 4>; // an op's, on its stack: most ops have few

// The argument (of this device) a kernel's output is, if any: the same TensorImpl as a view, or
// a view of the same memory (an output of this device over the argument's storage).
at::Tensor back_to_device(const at::Tensor &out, const Inputs &inputs) {
    for (const auto &in : inputs) {
        if (out.unsafeGetTensorImpl() == in.view.unsafeGetTensorImpl()) {
            return in.tensor;
        }
    }
    for (const auto &in : inputs) {
        if (out.storage().data() == in.view.storage().data() && out.device() == in.view.device() && out.storage().nbytes() > 0 &&
            !in.view._is_zerotensor()) {
            return tensor_over(in.tensor.storage(), out);
        }
    }
    return out;
}

// Takes the op's `n` arguments off the stack.
std::vector<c10::IValue> pop_arguments(torch::jit::Stack *stack, size_t n) {
    const auto first = stack->end() - static_cast<std::ptrdiff_t>(n);
    std::vector<c10::IValue> args(std::make_move_iterator(first), std::make_move_iterator(stack->end()));
    stack->erase(first, stack->end());
    return args;
}

// Declares each tensor of this device the op writes through its arguments (a `Tensor(a!)` in the
// schema).
void declare_written(Attempt &a, const c10::FunctionSchema &schema, const std::vector<c10::IValue> &args) {
    for (size_t i = 0; i < args.size(); ++i) {
        const auto *alias = schema.arguments()[i].alias_info();
        if (alias == nullptr || !alias->isWrite()) {
            continue;
        }
        c10::IValue v = args[i];
        each_tensor(v, [&](const at::Tensor &t) {
            if (ours(t)) {
                a.writes(t);
            }
            return t;
        });
    }
}

// On the simulated device the kernels are the CPU's, which take a tensor of the host beside the
// device's copies; CUDA's refuse one (but a 0-dim tensor, which they read as a number, indices,
// and CTC's lengths), and so does this, so that code mixing devices fails on the simulated
// device as it would on a GPU.
void check_one_device(const c10::FunctionSchema &schema, const std::vector<c10::IValue> &args) {
    bool any_ours = false, any_host = false;
    const auto see = [&](const c10::IValue &v) {
        if (v.isTensor()) {
            const at::Tensor &t = v.toTensor();
            any_ours = any_ours || ours(t);
            any_host = any_host || (t.defined() && t.device().is_cpu() && t.dim() > 0);
        }
    };
    for (const c10::IValue &arg : args) {
        see(arg);
        if (arg.isList()) {
            for (const c10::IValue &element : arg.toListRef()) {
                see(element);
            }
        }
    }
    if (!any_ours || !any_host || callbacks->accelerator() >= 0) {
        return;
    }
    static const std::array<std::string, 6> take_host_tensors{"aten::index", "aten::index_put", "aten::index_put_",
                                                              "aten::_index_put_impl_", "aten::_ctc_loss",
                                                              "aten::_ctc_loss_backward"};
    TORCH_CHECK(std::find(take_host_tensors.begin(), take_host_tensors.end(), schema.name()) != take_host_tensors.end(),
                "Expected all tensors to be on the same device, but found at least two devices, tensorref:0 and cpu! (",
                schema.name(), " was given a tensor of the host, which CUDA's kernels refuse too)");
}

// Pushes the arguments with each tensor of this device replaced by its device copy, and a
// `device=` of this device by the compute device (the host where nothing was acquired).
Inputs push_arguments(Attempt &a, const c10::FunctionSchema &schema, const std::vector<c10::IValue> &args,
                                  torch::jit::Stack *stack) {
    const size_t first = stack->size();
    Inputs inputs;
    declare_written(a, schema, args);
    for (const c10::IValue &arg : args) {
        c10::IValue v = arg;
        each_tensor(v, [&](const at::Tensor &t) {
            if (!ours(t)) {
                return t;
            }
            for (const auto &in : inputs) {
                if (in.tensor.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
                    return in.view; // given twice: the same view, as libtorch's overlap checks expect
                }
            }
            if (t._is_zerotensor()) { // nothing to load: the compute device's kernel reads it as zeros
                inputs.push_back({t, memoryless(t, compute_device(), kZero), nullptr});
                return inputs.back().view;
            }
            at::Tensor view = a.acquire(t);
            const void *memory = view.storage().data();
            inputs.push_back({t, std::move(view), memory});
            return inputs.back().view;
        });
        stack->push_back(std::move(v));
    }
    for (size_t i = first; i < stack->size(); ++i) {
        if ((*stack)[i].isDevice() && (*stack)[i].toDevice().type() == kDevice) {
            const int cuda = inputs.empty() ? -1 : callbacks->accelerator();
            (*stack)[i] = cuda < 0 ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda));
        }
    }
    return inputs;
}

// Turns the kernel's outputs (from `first` on the stack) into tensors of this device: an argument
// again (in place, out=), a view of one, or new storages; a storage whose memory the kernel moved
// (an out= argument it resized to more) grows to that memory, placed as a new home; and each
// argument takes the geometry the kernel gave it. Ends the op. New storages keep recipes from
// `replay` (over `sources`, the op's inputs) when every output is one.
//
// An output the kernel made on another device than the one it computed on stays as it is, as the
// op on that device returns it: CUDA's efficient attention returns its random seed and offset as
// CPU tensors, which its backward reads on the host.
void place_outputs(Attempt &a, torch::jit::Stack *stack, size_t first, const Inputs &inputs,
                   std::unique_ptr<Replay> replay, const std::vector<at::Tensor> &sources) {
    const c10::Device computed = inputs.empty() ? c10::Device(c10::kCPU) : inputs.front().view.device(); // see push_arguments
    const auto placed_here = [&](const at::Tensor &t) { return t.defined() && !ours(t) && t.device() == computed; };
    c10::SmallVector<at::Tensor, 4> fresh;
    bool all_fresh = true;
    for (size_t i = first; i < stack->size(); ++i) {
        each_tensor((*stack)[i], [&](const at::Tensor &t) {
            if (!placed_here(t)) {
                all_fresh = all_fresh && !t.defined();
                return t;
            }
            at::Tensor back = back_to_device(t, inputs);
            if (!ours(back) && back._is_zerotensor()) {
                back = memoryless(back, c10::Device(kDevice, 0), kZero);
            } else if (!ours(back)) {
                fresh.push_back(back);
            }
            all_fresh = all_fresh && !ours(back);
            return back;
        });
    }
    c10::SmallVector<const Input *, 2> moved; // the first input over each storage the kernel moved
    for (const auto &in : inputs) {
        const bool first_over_it = std::none_of(moved.begin(), moved.end(), [&](const Input *m) {
            return m->view.storage().is_alias_of(in.view.storage());
        });
        if (in.view.storage().data() != in.memory && first_over_it) {
            moved.push_back(&in);
            fresh.push_back(in.view);
        }
    }
    std::vector<at::Tensor> placed;
    if (fresh.empty()) {
        a.end();
    } else if (all_fresh && moved.empty()) {
        placed = a.place(fresh, std::move(replay), sources);
    } else {
        placed = a.place(fresh);
    }
    size_t next = 0;
    for (size_t i = first; i < stack->size(); ++i) {
        each_tensor((*stack)[i], [&](const at::Tensor &t) { return placed_here(t) ? placed[next++] : t; });
    }
    for (const Input *in : moved) {
        grow(in->tensor.storage(), placed[next++].storage());
    }
    for (const auto &in : inputs) {
        if (in.view.sizes() != in.tensor.sizes() || in.view.strides() != in.tensor.strides() ||
            in.view.storage_offset() != in.tensor.storage_offset()) {
            in.tensor.unsafeGetTensorImpl()->set_sizes_and_strides(in.view.sizes(), in.view.strides(), in.view.storage_offset());
        }
    }
}

// An op's arguments made those of the op its compute device runs in its place (`run_as`), on the
// stack from `first` on.
using Adapt = void (*)(torch::jit::Stack &stack, size_t first);

// Runs `op` as one op under the manager, its kernel the compute device's kernel of `kernel`: `op`
// itself (the fallback's), or the op that computes it there, over its arguments made that op's
// by `adapt`. Acquired inputs, room for the outputs where the compute device's kernels allocate
// without asking (residency/core/outputs.cpp), the kernel, placed outputs (with recipes, where the
// manager recomputes and the op can be run again); run again from its arguments when it must
// wait for room.
void run_as(const c10::OperatorHandle &op, const c10::OperatorHandle &kernel, Adapt adapt, torch::jit::Stack *stack) {
    const auto &schema = op.schema();
    const std::vector<c10::IValue> args = pop_arguments(stack, schema.arguments().size());
    check_one_device(schema, args);
    const size_t first = stack->size();
    run(kernel.schema().name().c_str(), [&](Attempt &a) {
        stack->resize(first);
        Inputs inputs = push_arguments(a, schema, args, stack);
        if (adapt != nullptr) {
            adapt(*stack, first);
        }
        if (a.reserves()) {
            a.reserve(tr_native::output_bytes(kernel, *stack, first).value_or(0));
        }
        // An op is made again over its inputs' homes: not one over zeros with no memory (no home),
        // nor one that read an input's conjugate or negative bit (a home has none).
        const bool remakeable = std::none_of(inputs.begin(), inputs.end(), [](const Input &in) {
            return in.tensor._is_zerotensor() || in.tensor.is_conj() || in.tensor.is_neg();
        });
        std::vector<at::Tensor> sources;
        std::unique_ptr<Replay> replay = a.recomputes() && remakeable ? replay_of(kernel, args, *stack, first, sources) : nullptr;
        a.kernel([&] { kernel.callBoxed(stack); });
        place_outputs(a, stack, first, inputs, std::move(replay), sources);
        for (Input &in : inputs) {
            if (!in.tensor._is_zerotensor()) { // a copy's view, kept for the next op's (op_views.h)
                tr_native::give_back(std::move(in.view));
            }
        }
    });
}

} // namespace

void fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack) { run_as(op, op, nullptr, stack); }

namespace {

// Convolution: libtorch's `_convolution` chooses its backend by the input's device, and on any
// device but its own calls the device's `convolution_overrideable` (autograd: its backward). The
// device runs the compute device's `convolution` and `convolution_backward` for them, which
// choose as they do there (cuDNN on CUDA; on the simulated device the host's choice, bit for bit
// the CPU's).
c10::OperatorHandle aten_op(const char *name) {
    return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

void convolution(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    static const c10::OperatorHandle kernel = aten_op("aten::convolution");
    run_as(op, kernel, nullptr, stack);
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) as convolution_backward takes it: the sizes of
// the bias (one per output channel) after the weight.
void with_bias_sizes(torch::jit::Stack &stack, size_t first) {
    const at::Tensor &weight = stack[first + 2].toTensor();
    const int64_t channels = stack[first + 6].toBool() ? weight.size(1) * stack[first + 8].toInt() : weight.size(0);
    stack.insert(stack.begin() + static_cast<std::ptrdiff_t>(first) + 3, c10::IValue(std::vector<int64_t>{channels}));
}

void convolution_backward(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    static const c10::OperatorHandle kernel = aten_op("aten::convolution_backward");
    run_as(op, kernel, &with_bias_sizes, stack);
}

// Elements `from` to `to` of a list argument, as a list (a tensor list, or a list of scalars:
// `_foreach_div_.ScalarList`).
c10::IValue slice(const c10::IValue &list, size_t from, size_t to) {
    if (list.isTensorList()) {
        const auto all = list.toTensorList();
        c10::List<at::Tensor> part;
        for (size_t i = from; i < to; ++i) {
            part.push_back(all.get(i));
        }
        return part;
    }
    const auto all = list.toList();
    c10::impl::GenericList part(all.elementType());
    for (size_t i = from; i < to; ++i) {
        part.push_back(all.get(i));
    }
    return part;
}

// An op over lists of independent tensors (a fused optimizer step, `_fused_adamw_`; a foreach
// step, `_foreach_addcdiv_`: an optimizer's steps over all its parameters), run on the compute
// device's own kernel, through the fallback: as one op where nothing bounds what an op may hold,
// else in chunks of consecutive elements, each one op whose tensors stay within the manager's
// limit (`list_op_bytes`; at least one element), since as one op every parameter, with its
// gradient and state, would have to be on the device together. Each list argument of the op's
// length is cut into the chunk's elements; a list the op returns is put back together from the
// chunks'. The device's own kernel, not libtorch's composite version (one op per tensor), so
// that an optimizer on this device rounds as it does there.
void list_op(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    const uint64_t limit = callbacks->list_op_bytes();
    if (limit == 0) {
        fallback(op, stack);
        return;
    }
    const auto &schema = op.schema();
    const std::vector<c10::IValue> args = pop_arguments(stack, schema.arguments().size());
    const size_t first = stack->size();
    size_t count = 0;
    for (const auto &a : args) {
        if (a.isTensorList() && a.toTensorList().size() > 0) {
            const size_t len = a.toTensorList().size();
            TORCH_CHECK(count == 0 || count == len, schema.name(), ": tensor lists of different lengths");
            count = len;
        }
    }
    std::vector<uint64_t> bytes(count, 0); // element i's tensors, over every list
    for (const auto &a : args) {
        if (a.isTensorList() && a.toTensorList().size() == count) {
            const auto list = a.toTensorList();
            for (size_t i = 0; i < count; ++i) {
                const at::Tensor t = list.get(i);
                bytes[i] += t.defined() ? t.nbytes() : 0;
            }
        }
    }
    const bool returns_list = schema.returns().size() == 1 && schema.returns()[0].type()->kind() == c10::TypeKind::ListType;
    c10::List<at::Tensor> returned;
    for (size_t from = 0; from < count;) {
        size_t to = from + 1;
        for (uint64_t held = bytes[from]; to < count && held + bytes[to] <= limit; ++to) {
            held += bytes[to];
        }
        for (const auto &a : args) {
            const bool cut = a.isList() && a.toList().size() == count;
            stack->push_back(cut ? slice(a, from, to) : a);
        }
        fallback(op, stack);
        if (returns_list) {
            for (const at::Tensor &t : stack->back().toTensorList()) {
                returned.push_back(t);
            }
        }
        stack->resize(first);
        from = to;
    }
    if (returns_list) {
        stack->push_back(std::move(returned));
    }
}

// Model code takes the accelerator's branch on any device that is not the CPU, and may ask for
// what CUDA has and the host has not: transformers' MoE layers count tokens per expert with
// `histc` of integers. On the host it runs in float (exact for counts below 2^24) and returns the
// input's dtype, as CUDA's does.
void histc(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    c10::IValue &input = (*stack)[stack->size() - op.schema().arguments().size()];
    const auto dtype = input.toTensor().scalar_type();
    if (!at::isIntegralType(dtype, /*includeBool=*/true)) {
        return fallback(op, stack);
    }
    input = input.toTensor().to(at::kFloat);
    fallback(op, stack);
    stack->back() = stack->back().toTensor().to(dtype);
}

// A tensor of `device` with the geometry, dtype and `requires_grad` of `t`, and no memory: what
// a question about a tensor's shape asks of it.
at::Tensor stand_in(const at::Tensor &t, c10::Device device) {
    at::Tensor s = memoryless(t, device, {});
    if (t.requires_grad()) {
        s.set_requires_grad(true);
    }
    return s;
}

// scaled_dot_product_attention asks the device's DispatchStub which kernel to take, and takes the
// math path on a device without one. This answers with the compute device's own choice, so that
// attention runs the kernel it runs there, asked over stand-ins of the inputs on that device:
// the choice reads their geometry and whether they require grad (the CPU's flash kernel has no
// gradient for a mask that requires one, so a learned attention bias takes the math path), never
// their memory (CUDA's checks alignment by storage offset, over the caching allocator's aligned
// blocks), so nothing is loaded for it. Python's dispatch modes do not see the stand-ins: while
// torch.compile traces with fake tensors, the choice is still the one the device makes eagerly.
int64_t sdp_choice(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const std::optional<at::Tensor> &mask,
                   double dropout, bool causal, std::optional<double> scale, bool gqa) {
    const c10::Device device = compute_device();
    const c10::DeviceGuard on(device);
    const c10::impl::ExcludeDispatchKeyGuard no_modes(
        c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
    std::optional<at::Tensor> mask_there;
    if (mask.has_value() && mask->defined()) {
        mask_there = stand_in(*mask, device);
    }
    return at::_fused_sdp_choice(stand_in(q, device), stand_in(k, device), stand_in(v, device), mask_there, dropout, causal, scale, gqa);
}

} // namespace

void register_kernels() {
    at::native::_fused_sdp_choice_stub.set_privateuse1_dispatch_ptr(&sdp_choice);
    static auto *aten = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    aten->impl("empty.memory_format", TORCH_FN(empty_memory_format));
    aten->impl("empty_strided", TORCH_FN(empty_strided));
    aten->impl("_efficientzerotensor", TORCH_FN(efficient_zero_tensor));
    aten->impl("as_strided", TORCH_FN(as_strided));
    aten->impl("view", TORCH_FN(view));
    aten->impl("_reshape_alias", TORCH_FN(reshape_alias));
    aten->impl("_copy_from", TORCH_FN(copy_from));
    aten->impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
    aten->impl("resize_", TORCH_FN(resize));
    aten->impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
    aten->impl("set_.source_Tensor", TORCH_FN(set_tensor));
    aten->impl("set_.source_Storage", TORCH_FN(set_whole_storage));
    aten->impl("set_", TORCH_FN(set_empty));
    aten->impl("_has_compatible_shallow_copy_type", TORCH_FN(shallow_copy_compatible));
    aten->impl("histc", torch::CppFunction::makeFromBoxedFunction<&histc>());
    aten->impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolution>());
    aten->impl("convolution_backward_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolution_backward>());
    auto &dispatcher = c10::Dispatcher::singleton();
    const std::pair<const char *, const char *> fused[] = {{"_fused_adam_", ""},    {"_fused_adam_", "tensor_lr"},
                                                           {"_fused_adamw_", ""},   {"_fused_adamw_", "tensor_lr"},
                                                           {"_fused_sgd_", ""},     {"_fused_sgd_", "tensor_lr"},
                                                           {"_fused_adagrad_", ""}, {"_fused_adagrad_", "tensor_lr"}};
    for (const auto &[name, overload] : fused) {
        if (dispatcher.findOp(c10::OperatorName(std::string("aten::") + name, overload))) {
            std::string schema = std::string(name) + (*overload ? std::string(".") + overload : "");
            aten->impl(schema.c_str(), torch::CppFunction::makeFromBoxedFunction<&list_op>());
        }
    }
    for (const c10::OperatorName &name : dispatcher.getAllOpNames()) {
        if (name.name.rfind("aten::_foreach_", 0) == 0) {
            std::string schema = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
            aten->impl(schema.c_str(), torch::CppFunction::makeFromBoxedFunction<&list_op>());
        }
    }
    // A composite kernel ranks above a fallback: an op the host computes with a kernel of its own
    // that also has a composite one (native_layer_norm's `math_` version; silu_backward's and
    // mish_backward's, implicit) would run that instead, with other rounding. Such ops take the
    // fallback as their kernel here, so every op runs the compute device's own kernel (bit for bit
    // the host's on the simulated device) and dispatches as it does on the host. Autograd is
    // unchanged: their derivatives are registered apart, and an implicit composite stands in for
    // none on a device with a kernel of its own, the host included.
    for (const c10::OperatorName &name : dispatcher.getAllOpNames()) {
        auto op = dispatcher.findOp(name);
        if (!op || name.name.rfind("aten::", 0) != 0 || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) ||
            !op->hasKernelForDispatchKey(c10::DispatchKey::CPU)) {
            continue;
        }
        if (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
            op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
            op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
            std::string schema = name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
            aten->impl(schema.c_str(), torch::CppFunction::makeFromBoxedFunction<&fallback>());
        }
    }
    // libtorch copies to and from a device it has no copy kernel for through `_copy_from`, whose
    // conjugate and negative bits its Conjugate and Negative fallbacks resolve first, by a clone,
    // itself a copy through `_copy_from` (a loop without end: a stack overflow). They pass it on
    // here with its bits, which the device's copy reads (Attempt::acquire). Only copies that
    // involve a device libtorch has no copy kernel for (this one) reach `_copy_from`.
    for (const auto key : {c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}) {
        auto *bits = new torch::Library(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
        bits->impl("_copy_from", torch::CppFunction::makeFallthrough());
        bits->impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
    }
    static auto *all = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    all->fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

} // namespace tr_device

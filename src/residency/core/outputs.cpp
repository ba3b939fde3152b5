// The bytes an op's kernel will allocate for its outputs, known before it runs (outputs.h). Where
// the compute device's kernels allocate without asking the manager (CUDA), a front door reserves
// that much room first (outputs.rs beside this, `Ticket::reserve`), so that the budget holds
// while the outputs appear.
//
// The op's meta kernel computes its outputs' sizes, strides and dtypes over meta tensors with the
// inputs' geometry, allocating nothing and drawing no random numbers; for ops that libtorch's C++
// has no meta kernel for (attention, embedding's backward ...) a rule of ours says the same
// (outputs_by_rule.cpp). An output over one of the inputs' storages (in-place, out=, a view) is
// no new memory, unless the kernel resizes an out= argument to more than its storage holds: that
// storage's new size is. An op whose outputs' sizes depend on its data (`nonzero`), or that has
// neither a meta kernel nor a rule and is not pointwise (`ask_pointwise` answers for those),
// cannot tell: it reserves nothing, and the manager counts its outputs as unreserved
// (ResidencyStats::output_bytes_unreserved).
//
// The answer depends on the op and its arguments' dtypes, sizes and strides, never on tensors'
// values, and a model asks for the same ops over the same shapes at every iteration: each answer
// is kept by that signature, and the meta kernel runs once per signature. (In a Python process
// many of PyTorch's meta kernels are Python functions, about 100 us a call; C++ programs run
// C++'s.)
#include "outputs.h"

#include "ivalue_tensors.h"
#include "outputs_by_rule.h"

#include <ATen/ExpandUtils.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace tr_native {

namespace {

// Whether every output of the op is one of its arguments, written in place (`Tensor(a!)`), and
// none is an out= argument (which the kernel may resize): nothing new, and no need to ask the meta
// kernel. An output that may alias an argument (`Tensor(a)`: `contiguous`, `reshape`) is a view
// or a new tensor as the arguments' geometry decides: the meta kernel tells which.
bool only_written(const c10::FunctionSchema &schema) {
    const auto &returns = schema.returns();
    const auto &args = schema.arguments();
    const auto written = [](const c10::Argument &r) { return r.alias_info() != nullptr && r.alias_info()->isWrite(); };
    return std::all_of(returns.begin(), returns.end(), written) &&
           std::none_of(args.begin(), args.end(), [](const c10::Argument &a) { return a.is_out(); });
}

// The meta kernel's answer for the arguments pushed from `first` on (see the file's opening).
std::optional<uint64_t> ask_meta(const c10::OperatorHandle &op, const torch::jit::Stack &stack, size_t first) {
    torch::jit::Stack meta(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end());
    std::vector<std::pair<const c10::StorageImpl *, size_t>> inputs; // and the bytes each had
    for (c10::IValue &v : meta) {
        each_tensor(v, [&](const at::Tensor &t) {
            if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) {
                return t; // a Python number stays one: it takes part in type promotion as such
            }
            at::Tensor m = at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
            inputs.emplace_back(m.storage().unsafeGetStorageImpl(), m.storage().nbytes());
            return m;
        });
    }
    try {
        op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
    } catch (const std::exception &) {
        return std::nullopt;
    }
    uint64_t bytes = 0;
    for (const auto &[storage, had] : inputs) {
        bytes += storage->nbytes() > had ? storage->nbytes() : 0; // an out= argument resized to more
    }
    for (c10::IValue &v : meta) {
        each_tensor(v, [&](const at::Tensor &t) {
            if (t.defined() && t.has_storage()) {
                const c10::StorageImpl *s = t.storage().unsafeGetStorageImpl();
                const auto known = [&](const auto &in) { return in.first == s; };
                if (std::none_of(inputs.begin(), inputs.end(), known)) {
                    inputs.emplace_back(s, s->nbytes()); // counted once, however many outputs view it
                    bytes += s->nbytes();
                }
            }
            return t;
        });
    }
    return bytes;
}

// The answer for a pointwise op without a meta kernel (in a process without PyTorch's Python,
// `relu`'s and `where`'s among others): each new output has the broadcast shape of the
// tensor arguments and the dtype the op gives them, which its CPU kernel tells over stand-ins of
// one element (ones: of size 1 for a tensor of some dimensions, 0-dim for a 0-dim one, a Python
// number as it is, so that type promotion is the same). Not for an op that draws random numbers
// or has out= arguments (the kernel resizes them).
std::optional<uint64_t> ask_pointwise(const c10::OperatorHandle &op, const torch::jit::Stack &stack, size_t first) {
    const auto &args = op.schema().arguments();
    if (!op.hasTag(at::Tag::pointwise) || op.hasTag(at::Tag::nondeterministic_seeded) ||
        std::any_of(args.begin(), args.end(), [](const c10::Argument &a) { return a.is_out(); })) {
        return std::nullopt;
    }
    torch::jit::Stack standins(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end());
    std::vector<int64_t> shape;
    std::vector<const c10::StorageImpl *> inputs;
    try {
        for (c10::IValue &v : standins) {
            each_tensor(v, [&](const at::Tensor &t) {
                if (!t.defined() || (t.unsafeGetTensorImpl()->is_wrapped_number() && t.is_cpu())) {
                    return t;
                }
                shape = at::infer_size(shape, t.sizes());
                at::Tensor one = at::ones(t.dim() == 0 ? at::IntArrayRef{} : at::IntArrayRef{1}, t.options().device(at::kCPU));
                if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
                    one.unsafeGetTensorImpl()->set_wrapped_number(true);
                }
                inputs.push_back(one.storage().unsafeGetStorageImpl());
                return one;
            });
        }
        op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &standins);
    } catch (const std::exception &) {
        return std::nullopt;
    }
    const uint64_t elements = c10::multiply_integers(shape);
    uint64_t bytes = 0;
    for (c10::IValue &v : standins) {
        each_tensor(v, [&](const at::Tensor &t) {
            const bool input = t.defined() && t.has_storage() &&
                               std::find(inputs.begin(), inputs.end(), t.storage().unsafeGetStorageImpl()) != inputs.end();
            bytes += t.defined() && !input ? elements * t.element_size() : 0; // in place or a view: nothing new
            return t;
        });
    }
    return bytes;
}

// What an answer depends on: the op, then each argument, a tensor by its dtype, whether it is a
// Python number, its sizes and strides, anything else by its value.
using Signature = std::vector<int64_t>;

struct SignatureHash {
    size_t operator()(const Signature &s) const {
        uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a over the words
        for (int64_t w : s) {
            h = (h ^ static_cast<uint64_t>(w)) * 0x100000001b3ULL;
        }
        return static_cast<size_t>(h);
    }
};

// Appends `v` to the signature `s`; false for an argument it cannot describe (the answer is then
// not kept).
bool describe(const c10::IValue &v, Signature &s) {
    if (v.isNone() || v.isGenerator()) {
        s.push_back(v.isNone() ? 0 : 1);
    } else if (v.isTensor()) {
        const at::Tensor &t = v.toTensor();
        s.push_back(2);
        s.push_back(t.defined() ? static_cast<int64_t>(t.scalar_type()) : -1);
        if (t.defined()) {
            s.push_back(t.unsafeGetTensorImpl()->is_wrapped_number());
            s.push_back(t.dim());
            s.insert(s.end(), t.sizes().begin(), t.sizes().end());
            s.insert(s.end(), t.strides().begin(), t.strides().end());
        }
    } else if (v.isInt() || v.isBool()) {
        s.push_back(v.isInt() ? 3 : 4);
        s.push_back(v.isInt() ? v.toInt() : v.toBool());
    } else if (v.isDouble()) {
        const double d = v.toDouble();
        int64_t bits = 0;
        std::memcpy(&bits, &d, sizeof bits);
        s.push_back(5);
        s.push_back(bits);
    } else if (v.isDevice()) {
        s.push_back(6);
        s.push_back(static_cast<int64_t>(v.toDevice().type()));
        s.push_back(v.toDevice().index());
    } else if (v.isString()) {
        const std::string &text = v.toStringRef();
        s.push_back(7);
        s.push_back(static_cast<int64_t>(text.size()));
        s.insert(s.end(), text.begin(), text.end());
    } else if (v.isList()) {
        const auto list = v.toListRef();
        s.push_back(8);
        s.push_back(static_cast<int64_t>(list.size()));
        return std::all_of(list.begin(), list.end(), [&](const c10::IValue &e) { return describe(e, s); });
    } else {
        return false;
    }
    return true;
}

// The answers so far, by signature (emptied when it holds this many).
constexpr size_t kMostKept = 1 << 16;
std::mutex kept_lock;
std::unordered_map<Signature, std::optional<uint64_t>, SignatureHash> &kept() {
    static auto *answers = new std::unordered_map<Signature, std::optional<uint64_t>, SignatureHash>; // lives for the process
    return *answers;
}

} // namespace

std::optional<uint64_t> output_bytes(const c10::OperatorHandle &op, const torch::jit::Stack &stack, size_t first) {
    if (only_written(op.schema())) {
        return 0;
    }
    Signature signature{reinterpret_cast<intptr_t>(&op.schema())};
    const bool describable = std::all_of(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end(),
                                         [&](const c10::IValue &v) { return describe(v, signature); });
    if (describable) {
        std::lock_guard<std::mutex> guard(kept_lock);
        auto found = kept().find(signature);
        if (found != kept().end()) {
            return found->second;
        }
    }
    std::optional<uint64_t> bytes = output_bytes_by_rule(op, stack, first);
    if (!bytes) {
        bytes = ask_meta(op, stack, first);
    }
    if (!bytes) {
        bytes = ask_pointwise(op, stack, first);
    }
    if (describable) {
        std::lock_guard<std::mutex> guard(kept_lock);
        if (kept().size() >= kMostKept) {
            kept().clear();
        }
        kept().emplace(std::move(signature), bytes);
    }
    return bytes;
}

} // namespace tr_native

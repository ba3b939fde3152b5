// Recipes for what the `tensorref` device's ops make (recomputation: src/residency/training/
// recompute.rs). An op whose outputs depend on nothing but its inputs keeps how to run it again:
// its arguments as its kernel got them, each input's place held by a placeholder. The manager
// may then drop such an output from the device when it evicts it, and make it again from its
// inputs' copies when it is next used. replay.rs beside this gives each output its recipe.
#include "device.h"

#include "guarded.h"

#include <ATen/core/enum_tag.h>

#include <algorithm>

namespace tr_device {
namespace {

// The placeholder for an input in a replay's arguments (an input is a tensor of the compute
// device only while its op runs; the recipe holds its storage apart).
const at::Tensor &placeholder() {
    static const at::Tensor slot = at::empty({0}, at::TensorOptions().dtype(at::kByte));
    return slot;
}

// Calls `f(tensor)` on every tensor `v` holds, leaving it as it is.
template <typename F> void visit_tensors(c10::IValue v, F &&f) {
    each_tensor(v, [&](const at::Tensor &t) {
        f(t);
        return t;
    });
}

// Whether `op`'s outputs are a function of its inputs alone, so that running it again on the same
// inputs makes the same bytes: not random (`nondeterministic_seeded`), bit for bit the same each
// run (not `nondeterministic_bitwise`, as CUDA's atomic adds are), writing no argument and
// returning no view (no alias in its schema), and every tensor it reads one of this device's
// (whose storages the manager holds for the recipe).
bool remakeable(const c10::OperatorHandle &op, const std::vector<c10::IValue> &args) {
    if (op.hasTag(at::Tag::nondeterministic_seeded) || op.hasTag(at::Tag::nondeterministic_bitwise)) {
        return false;
    }
    const auto &schema = op.schema();
    const auto aliased = [](const c10::Argument &a) { return a.alias_info() != nullptr; };
    if (std::any_of(schema.arguments().begin(), schema.arguments().end(), aliased) ||
        std::any_of(schema.returns().begin(), schema.returns().end(), aliased)) {
        return false;
    }
    bool any = false;
    bool all_ours = true;
    for (const c10::IValue &arg : args) {
        visit_tensors(arg, [&](const at::Tensor &t) {
            any = any || t.defined();
            all_ours = all_ours && (!t.defined() || ours(t));
        });
    }
    return any && all_ours;
}

} // namespace

std::unique_ptr<Replay> replay_of(const c10::OperatorHandle &op, const std::vector<c10::IValue> &args,
                                  const std::vector<c10::IValue> &pushed, size_t first, std::vector<at::Tensor> &inputs) {
    if (!remakeable(op, args)) {
        return nullptr;
    }
    for (const c10::IValue &arg : args) {
        visit_tensors(arg, [&](const at::Tensor &t) {
            if (t.defined()) {
                inputs.push_back(t);
            }
        });
    }
    auto replay = std::make_unique<Replay>(Replay{op, {}});
    replay->args.reserve(pushed.size() - first);
    for (size_t i = first; i < pushed.size(); ++i) {
        c10::IValue v = pushed[i];
        each_tensor(v, [](const at::Tensor &t) { return t.defined() ? placeholder() : t; });
        replay->args.push_back(std::move(v));
    }
    return replay;
}

} // namespace tr_device

// Runs `replay`'s op again over `inputs` (`n` `at::Tensor*` of the compute device, in the order
// `replay_of` gave them) and returns its `output`-th defined output as a new `at::Tensor*`. The
// kernel runs below autograd, as the fallback's does.
extern "C" int tr_native_torch_device_replay(const tr_device::Replay *replay, size_t output, const void *const *inputs, size_t n,
                                             void **out, char *err, size_t err_len) {
    return tr_native::guarded(err, err_len, [&] {
        const auto name = replay->op.schema().name();
        torch::jit::Stack stack;
        stack.reserve(replay->args.size());
        size_t next = 0;
        for (c10::IValue v : replay->args) {
            tr_device::each_tensor(v, [&](const at::Tensor &t) {
                if (!t.is_same(tr_device::placeholder())) {
                    return t;
                }
                TORCH_CHECK(next < n, name, " made again: more inputs in its arguments than the recipe holds");
                return *static_cast<const at::Tensor *>(inputs[next++]);
            });
            stack.push_back(std::move(v));
        }
        TORCH_CHECK(next == n, name, " made again: the recipe holds ", n, " inputs, its arguments take ", next);
        {
            at::AutoDispatchBelowADInplaceOrView below;
            replay->op.callBoxed(&stack);
        }
        size_t k = 0;
        at::Tensor found;
        for (c10::IValue &v : stack) {
            tr_device::each_tensor(v, [&](const at::Tensor &t) {
                if (t.defined() && k++ == output) {
                    found = t;
                }
                return t;
            });
        }
        TORCH_CHECK(found.defined(), name, " made again has no output ", output);
        *out = new at::Tensor(std::move(found));
    });
}

// Frees a replay (Rust's, once no recipe holds it).
extern "C" void tr_native_torch_device_replay_drop(tr_device::Replay *replay) { delete replay; }

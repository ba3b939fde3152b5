// The `tensorref` device's C++ half, shared by device.cpp (registration, allocator, guard,
// hooks) and kernels.cpp (its own kernels and the boxed fallback). The Rust half, mod.rs beside
// this, answers through `Callbacks`.
#pragma once

#include "ivalue_tensors.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <memory>
#include <utility>
#include <vector>

namespace tr_device {

struct Ticket; // the manager's ticket for one op (Rust)
struct Entry;  // a storage's host home (Rust's Arc<Entry>)

using AttemptFn = int (*)(void *ctx, Ticket *ticket);
using BodyFn = int (*)(void *ctx);

// How to run an op again (replay.cpp): the op, and its arguments as its kernel got them, each
// input's place held by a placeholder (`replay_of`).
struct Replay {
    c10::OperatorHandle op;
    std::vector<c10::IValue> args;
};

// An op's recipe as Rust takes it (`RecipeIn`, replay.rs): the replay (Rust owns it from then on)
// and the op's inputs, each a home and a tensor of this device with the input's geometry.
struct RecipeIn {
    Replay *replay;
    const Entry *const *homes;
    const void *const *likes;
    size_t n;
};

// Field for field the Rust struct `Callbacks` (mod.rs), which documents each.
struct Callbacks {
    int (*run)(const char *op, AttemptFn attempt, void *ctx, char *err, size_t len);
    int (*acquire)(Ticket *ticket, const Entry *home, const void *like, int write, void **out);
    int (*kernel)(Ticket *ticket, BodyFn body, void *ctx);
    int (*recomputes)(Ticket *ticket);
    int (*reserves)(Ticket *ticket);
    int (*reserve)(Ticket *ticket, uint64_t bytes);
    int (*place)(Ticket *ticket, const void *const *results, size_t n, RecipeIn *recipe, const Entry **homes);
    int (*end)(Ticket *ticket);
    int (*unheld_home)(const Entry *home, const void *like, void **out, char *err, size_t len);
    const Entry *(*adopt)(void *host);
    void (*release)(const Entry *home);
    int (*accelerator)();
    uint64_t (*list_op_bytes)();
    int (*memory)(int restart_peak, struct Memory *out);
};

// Field for field the Rust struct `Memory` (mod.rs), which documents each.
struct Memory {
    uint64_t allocated, peak_allocated, reserved, peak_reserved, budget;
};

extern const Callbacks *callbacks;

constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;

// Whether `t` is a tensor of this device.
inline bool ours(const at::Tensor &t) { return t.defined() && t.device().type() == kDevice; }

using tr_native::each_tensor;

// The home of the storage `t` views (t is ours).
const Entry *home_of(const at::Tensor &t);

// The host memory of `t`'s storage viewed as `t` (its conjugate and negative bits too), when the
// manager does not hold that storage (undefined when it does: its device copy may be newer).
at::Tensor unheld_home(const at::Tensor &t);

// A storage of this device over `home` (whose reference it takes) of `nbytes` bytes.
c10::Storage storage_over(const Entry *home, size_t nbytes);

// A tensor of this device over `storage` with the dtype, geometry and conjugate and negative bits
// of `like`.
at::Tensor tensor_over(c10::Storage storage, const at::Tensor &like);

// Gives `storage` (of this device) the memory of `grown`, a larger one, as libtorch grows a
// storage in place: every tensor over it sees the new bytes.
void grow(const c10::Storage &storage, const c10::Storage &grown);

// The allocator of this device: a home in host memory per storage.
c10::Allocator *allocator();

// A Rust callback failed; its error waits on the Rust side.
struct RustFailed {};

// One attempt at an op under the manager (the ticket is NULL with no manager).
class Attempt {
  public:
    explicit Attempt(Ticket *ticket) : ticket_(ticket) {}

    // Declares that the op writes `t` (before any input is acquired).
    void writes(const at::Tensor &t);

    // The device copy of `t`'s storage, viewed as `t`, its conjugate and negative bits too (the
    // kernels of `mm`, `dot`, `copy_` ... read them). Inputs over a storage the op writes all
    // view one StorageImpl of their own over the copy's memory: libtorch's overlap checks see
    // them as one storage, as on the CPU, and a kernel that resizes an out= argument moves that
    // one to new memory, never the manager's copy.
    at::Tensor acquire(const at::Tensor &t);

    // Runs the kernel; on the simulated device its allocations ask the budget for room.
    template <typename F> void kernel(F &&body) {
        struct Ctx {
            F *body;
            std::exception_ptr error;
        } ctx{&body, nullptr};
        auto trampoline = [](void *p) -> int {
            auto *c = static_cast<Ctx *>(p);
            try {
                (*c->body)();
                return 0;
            } catch (...) {
                c->error = std::current_exception();
                return 1;
            }
        };
        int rc = callbacks->kernel(ticket_, trampoline, &ctx);
        if (rc == 2 && ctx.error) {
            std::rethrow_exception(ctx.error); // the kernel's own error
        }
        if (rc != 0) {
            throw RustFailed{}; // refused room, or failed otherwise on the Rust side
        }
    }

    // Whether the op's results may keep recipes (the manager recomputes).
    bool recomputes() const;

    // Whether the kernel's outputs need room made before it runs (the compute device's kernels
    // allocate without asking the manager: CUDA), and making that room for `bytes` (once, after
    // the inputs are acquired; held until the outputs are placed).
    bool reserves() const;
    void reserve(uint64_t bytes);

    // Makes each result (a tensor of the compute device) a new managed storage and ends the op;
    // returns the results as tensors of this device. With `replay` (how to make each result
    // again from `inputs`), each result keeps a recipe.
    std::vector<at::Tensor> place(c10::ArrayRef<at::Tensor> results, std::unique_ptr<Replay> replay = nullptr,
                                  const std::vector<at::Tensor> &inputs = {});

    // Ends an op that made no new storage.
    void end();

  private:
    Ticket *ticket_;
    std::vector<const c10::StorageImpl *> written_;                      // storages of this device the op writes
    std::vector<std::pair<const c10::StorageImpl *, c10::Storage>> aliases_; // each one's StorageImpl for the kernel
};

// Runs `attempt(Attempt&)` under the manager: again while other ops hold the room it needs,
// once more after evicting if the device ran out of memory. Errors come out as exceptions: the
// kernel's own, c10::OutOfMemoryError when the device or its budget has no room, else c10::Error.
template <typename F> void run(const char *op, F &&attempt) {
    struct Ctx {
        F *attempt;
        std::exception_ptr error;
    } ctx{&attempt, nullptr};
    auto trampoline = [](void *p, Ticket *ticket) -> int {
        auto *c = static_cast<Ctx *>(p);
        c->error = nullptr;
        try {
            Attempt a(ticket);
            (*c->attempt)(a);
            return 0;
        } catch (const RustFailed &) {
            return 1;
        } catch (const c10::OutOfMemoryError &) {
            c->error = std::current_exception();
            return 3;
        } catch (...) {
            c->error = std::current_exception();
            return 2;
        }
    };
    char err[512] = {0};
    const int rc = callbacks->run(op, trampoline, &ctx, err, sizeof err);
    if (rc != 0) {
        if (ctx.error) {
            std::rethrow_exception(ctx.error);
        }
        TORCH_CHECK_WITH(OutOfMemoryError, rc != 4, err); // no room on the device or in its budget
        TORCH_CHECK(false, err);
    }
}

// How to make the outputs of `op` again, or nullptr when they depend on more than its inputs
// (replay.cpp): `args` are its arguments, `pushed` the same as its kernel gets them (from `first`
// on). `inputs` gets each input, in the order the replay takes them.
std::unique_ptr<Replay> replay_of(const c10::OperatorHandle &op, const std::vector<c10::IValue> &args,
                                  const std::vector<c10::IValue> &pushed, size_t first, std::vector<at::Tensor> &inputs);

// Every op without a kernel of its own: the compute device's kernel of the op, under the manager
// (kernels.cpp).
void fallback(const c10::OperatorHandle &op, torch::jit::Stack *stack);

// Registers the kernels and the fallback (kernels.cpp).
void register_kernels();

// Registers the fused recurrent cells of the simulated device (recurrent.cpp).
void register_recurrent_cells();

// Registers autocast's casts on the device (autocast.cpp).
void register_autocast();

} // namespace tr_device

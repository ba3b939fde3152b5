// Cache hints for libtorch's objects an op reads of its inputs (src/residency/core/cache_lines.rs):
// each asks the CPU to fetch memory without waiting for it. No call here can fail or throw.
#include <ATen/ATen.h>

#include <cstdint>

namespace {

// Fetches every cache line of the `bytes` bytes at `p`.
void fetch_range(const void *p, size_t bytes) {
    auto at = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
    for (auto end = reinterpret_cast<uintptr_t>(p) + bytes; at < end; at += 64) {
        __builtin_prefetch(reinterpret_cast<const void *>(at));
    }
}

// A VariableVersion is one pointer to its shared counter (or null: an inference tensor's).
static_assert(sizeof(c10::VariableVersion) == sizeof(void *), "VariableVersion is one pointer");

} // namespace

extern "C" {

// Fetches the TensorImpls of the `n` at::Tensors at `tensors`, then the version counters they
// point at (which an op's view of a device copy shares). Reads each at::Tensor, and each
// TensorImpl's version counter field.
void tr_native_fetch_tensors(const void *const *tensors, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        fetch_range(static_cast<const at::Tensor *>(tensors[i])->unsafeGetTensorImpl(), sizeof(c10::TensorImpl));
    }
    for (size_t i = 0; i < n; ++i) {
        const auto &version = static_cast<const at::Tensor *>(tensors[i])->unsafeGetTensorImpl()->version_counter();
        __builtin_prefetch(*reinterpret_cast<void *const *>(&version));
    }
}

// Fetches the StorageImpl at `storage` (its data pointer, size and reference count).
void tr_native_fetch_storage(uintptr_t storage) {
    fetch_range(reinterpret_cast<const void *>(storage), sizeof(c10::StorageImpl));
}

} // extern "C"

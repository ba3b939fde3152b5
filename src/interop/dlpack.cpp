// DLPack exchange with libtorch's own converters (at::fromDLPack / at::toDLPack), for
// src/interop/dlpack.rs. Tensors cross as `at::Tensor*` (what tch's Tensor::from_ptr / as_ptr
// carry); no C++ exception leaves this file: failures return 1 and copy the message into `err`.
#include "guarded.h"

#include <ATen/DLConvertor.h>

#include <atomic>
#include <memory>

using tr_native::guarded;

extern "C" {

// Wraps the DLManagedTensor `managed` (taking ownership) as a new heap `at::Tensor` sharing its
// memory, written to `*out` (free it with tch, i.e. `delete`). The producer's deleter runs exactly
// once: when the last at::Tensor using the memory dies, or here if the conversion fails.
int tr_native_from_dlpack(void *managed, void **out, char *err, size_t err_len) {
    auto *src = static_cast<DLManagedTensor *>(managed);
    // Runs the producer's deleter at most once, whichever path gets there first (from_blob may
    // already own it when it throws).
    auto done = std::make_shared<std::atomic<bool>>(false);
    auto release = [src, done]() {
        if (!done->exchange(true) && src->deleter != nullptr) {
            src->deleter(src);
        }
    };
    int failed = guarded(err, err_len, [&] {
        at::Tensor t = at::fromDLPack(src, [release](void *) { release(); });
        *out = new at::Tensor(std::move(t));
    });
    if (failed) {
        release();
    }
    return failed;
}

// Exports `*tensor` (an `at::Tensor*`, borrowed) as a new DLManagedTensor sharing its memory,
// written to `*out`. The consumer owns it and must call its deleter once.
int tr_native_to_dlpack(const void *tensor, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] { *out = at::toDLPack(*static_cast<const at::Tensor *>(tensor)); });
}

// Gives back a DLManagedTensor that will not be consumed: runs its deleter (NULL is a no-op).
void tr_native_dlpack_delete(void *managed) {
    auto *m = static_cast<DLManagedTensor *>(managed);
    if (m != nullptr && m->deleter != nullptr) {
        m->deleter(m);
    }
}

} // extern "C"

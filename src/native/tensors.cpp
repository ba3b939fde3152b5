// Small device-generic tensor helpers the Rust side cannot express through tch (whose Device has
// no `meta`, and whose Scalar cannot be used safely after a libtorch error). Tensors cross as
// `at::Tensor*` (tch's Tensor::as_ptr / from_ptr); no C++ exception leaves this file: failures
// return 1 and copy the message into `err`.
#include "guarded.h"

#include <ATen/ATen.h>

using tr_native::guarded;

extern "C" {

// A 0-dim tensor of dtype `kind` holding `value`, on the device of `like` (CPU, CUDA, meta...).
// `fill_` passes the value to the kernel as an argument: no host-to-device copy.
int tr_native_scalar_like(const void *like, double value, int kind, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &t = *static_cast<const at::Tensor *>(like);
        auto options = at::TensorOptions().dtype(static_cast<at::ScalarType>(kind)).device(t.device());
        *out = new at::Tensor(at::empty({}, options).fill_(value));
    });
}

// `t` on libtorch's meta device: same sizes, strides and dtype, no data.
int tr_native_to_meta(const void *t, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &src = *static_cast<const at::Tensor *>(t);
        *out = new at::Tensor(at::empty_strided(src.sizes(), src.strides(), src.options().device(at::kMeta)));
    });
}

// Whether `t` lives on the meta device.
int tr_native_is_meta(const void *t) {
    return static_cast<const at::Tensor *>(t)->is_meta() ? 1 : 0;
}

} // extern "C"

// Small device-generic tensor helpers the Rust side cannot express through tch (whose Device has
// no `meta`, and whose Scalar cannot be used safely after a libtorch error). Tensors cross as
// `at::Tensor*` (tch's Tensor::as_ptr / from_ptr); no C++ exception leaves this file: failures
// return 1 and copy the message into `err`.
#include "guarded.h"

#include <ATen/ATen.h>

using tr_native::guarded;

extern "C" {

namespace {

// The c10::Scalar of a tagged value (tag 0: the int64 `i`; 1: the double `f`; 2: the bool
// `i != 0`), so that libtorch converts it to a tensor's dtype with its own checks.
c10::Scalar scalar_of(int tag, int64_t i, double f) {
    switch (tag) {
    case 0:
        return c10::Scalar(i);
    case 2:
        return c10::Scalar(i != 0);
    default:
        return c10::Scalar(f);
    }
}

} // namespace

// A 0-dim tensor of dtype `kind` holding the tagged value (see `scalar_of`), on the device of
// `like` (CPU, CUDA, meta...), marked a wrapped number as PyTorch marks a Python number: type
// promotion then never lets it raise the dtype of a tensor of its category, a 0-dim one
// included. `fill_` passes the value to the kernel as an argument: no host-to-device copy. On
// meta (an op's sizes asked before it runs) it is left unmarked: the meta kernels PyTorch writes
// in Python take a wrapped number as a Python number, which only a CPU tensor can become. `kind`
// already promotes as the number would beside a tensor of some dimensions; beside a 0-dim one
// the sizes asked may come out wider than the result (a few bytes reserved over).
int tr_native_scalar_like(const void *like, int tag, int64_t i, double f, int kind, void **out, char *err,
                          size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &t = *static_cast<const at::Tensor *>(like);
        auto options = at::TensorOptions().dtype(static_cast<at::ScalarType>(kind)).device(t.device());
        auto value = at::empty({}, options).fill_(scalar_of(tag, i, f));
        value.unsafeGetTensorImpl()->set_wrapped_number(!t.is_meta());
        *out = new at::Tensor(std::move(value));
    });
}

// at::arange(start, end, step) of dtype `kind`: libtorch's own checks (finite bounds, a step
// leading from start to end, a size that fits memory, a dtype arange supports) raise here, where
// they are caught, rather than inside tch's Scalar.
int tr_native_arange(double start, double end, double step, int kind, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        *out = new at::Tensor(at::arange(start, end, step, at::TensorOptions().dtype(static_cast<at::ScalarType>(kind))));
    });
}

// Fills `t` in place with the tagged value, converted to its dtype as libtorch's fill_ does.
int tr_native_fill(const void *t, int tag, int64_t i, double f, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        at::Tensor target = *static_cast<const at::Tensor *>(t);
        target.fill_(scalar_of(tag, i, f));
    });
}

// Powers with a Scalar side, as libtorch's Scalar overloads compute them. `how` 0: `t` raised to
// the tagged value into `*out`, its special exponents included (2 squares, 0.5 takes the square
// root...), where a 0-dim exponent tensor would take the general kernel, whose last bit differs;
// 1: the same in place into `t`; 2: the tagged value raised to `t` into `*out`, a contiguous
// result whatever `t`'s layout (a 0-dim base tensor would follow `t`'s strides).
int tr_native_pow(const void *t, int tag, int64_t i, double f, int how, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        at::Tensor tensor = *static_cast<const at::Tensor *>(t);
        switch (how) {
        case 1:
            tensor.pow_(scalar_of(tag, i, f));
            break;
        case 2:
            *out = new at::Tensor(at::pow(scalar_of(tag, i, f), tensor));
            break;
        default:
            *out = new at::Tensor(at::pow(tensor, scalar_of(tag, i, f)));
        }
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

// The bytes of `out`'s storage, or 0 where it is the storage of one of the `n` `inputs` (a view
// of an input, or the input itself) or `out` is undefined.
int tr_native_new_storage_bytes(const void *out, const void *const *inputs, size_t n, uint64_t *bytes, char *err,
                                size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &t = *static_cast<const at::Tensor *>(out);
        *bytes = 0;
        if (!t.defined() || !t.has_storage()) {
            return;
        }
        const c10::StorageImpl *storage = t.storage().unsafeGetStorageImpl();
        for (size_t k = 0; k < n; ++k) {
            const auto &input = *static_cast<const at::Tensor *>(inputs[k]);
            if (input.has_storage() && input.storage().unsafeGetStorageImpl() == storage) {
                return;
            }
        }
        *bytes = storage->nbytes();
    });
}

} // extern "C"

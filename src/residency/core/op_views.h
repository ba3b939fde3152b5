// The views of device copies an op's inputs are, made from TensorImpls earlier ops let go of
// (op_views.cpp).
#pragma once

#include <ATen/ATen.h>

namespace tr_native {

// A new tensor of `dtype` with `sizes`, `strides` and `offset` over `storage`, on its device:
// what at::empty({0}) and set_ make, built directly, without their two calls through the
// dispatcher (autograd's wrappers, the version bump of an in-place op).
at::Tensor tensor_over(c10::Storage storage, caffe2::TypeMeta dtype, at::IntArrayRef sizes, at::IntArrayRef strides,
                       int64_t offset);

// The same for an op's input or a result's home, from a kept one where there is one (see
// op_views.cpp). Its version counter is not to be used before `counts_versions`.
at::Tensor kept_tensor_over(c10::Storage storage, caffe2::TypeMeta dtype, at::IntArrayRef sizes,
                            at::IntArrayRef strides, int64_t offset);

// A heap at::Tensor holding `t`, for Rust to own: one that came back empty where there is one
// (see op_views.cpp), or a new one; either way `delete` frees it.
at::Tensor *boxed(at::Tensor &&t);

// Frees `view`, an op's input view that the op is done with or a dying home, keeping its
// TensorImpl for a later one where it may (see op_views.cpp).
void give_back(at::Tensor &&view);

// `view` counts versions with `like` (one counter per storage: an op's input and the tensor it
// stands for, a home and its result). Where `like` counts none (an inference tensor), `view`
// keeps its own, or gets one if it has none (a kept view).
void counts_versions(const at::Tensor &view, const at::Tensor &like);

} // namespace tr_native

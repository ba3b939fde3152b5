// The bytes an op's kernel will allocate for its outputs, before it runs (outputs.cpp), for the
// front doors that reserve room for them: the `tensorref` device's fallback and the runner of the
// ops generated from libtorch's schema.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <optional>

namespace tr_native {

// The bytes of the new storages `op`'s kernel will make for its outputs, from its meta kernel over
// the arguments on `stack` from `first` on; nullopt where the meta kernel cannot tell (sizes that
// depend on the data, or no meta kernel).
std::optional<uint64_t> output_bytes(const c10::OperatorHandle &op, const torch::jit::Stack &stack, size_t first);

} // namespace tr_native

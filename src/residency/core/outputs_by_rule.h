// The bytes of an op's new outputs by a rule of ours, for ops libtorch's C++ has no meta kernel
// for (outputs_by_rule.cpp); outputs.cpp asks it first.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <optional>

namespace tr_native {

// The bytes of the new storages `op`'s kernel makes for its outputs on the arguments on `stack`
// from `first` on, where a rule knows them; nullopt for an op without one.
std::optional<uint64_t> output_bytes_by_rule(const c10::OperatorHandle &op, const torch::jit::Stack &stack, size_t first);

} // namespace tr_native

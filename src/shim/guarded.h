// The one exception boundary of the C++ shims: no C++ exception may leave them. `guarded` runs
// a body, returns 0, or 1 with the message (libtorch's first line, without its backtrace) copied
// NUL-terminated into `err`.
#pragma once

#include <c10/util/FunctionRef.h>

#include <cstddef>

namespace tr_native {

// The boundary itself, compiled once (guarded.cpp).
int guarded_call(char *err, size_t err_len, c10::function_ref<void()> body);

// Called inside a `catch (...)` block: copies the exception being handled's message into `err`
// and returns 1. A kernel that catches everything and calls this keeps one small handler of its
// own, and shares the ones that tell exceptions apart.
int caught(char *err, size_t err_len);

template <typename F> int guarded(char *err, size_t err_len, F body) { return guarded_call(err, err_len, body); }

} // namespace tr_native

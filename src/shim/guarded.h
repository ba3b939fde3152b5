// The one exception boundary of the C++ shims: no C++ exception may leave them. `guarded` runs
// a body, returns 0, or 1 with the message (libtorch's first line, without its backtrace) copied
// NUL-terminated into `err`.
#pragma once

#include <c10/util/FunctionRef.h>

#include <cstddef>

namespace tr_native {

// The boundary itself, compiled once (guarded.cpp): a thousand generated kernels share its
// handlers rather than each carrying a copy.
int guarded_call(char *err, size_t err_len, c10::function_ref<void()> body);

template <typename F> int guarded(char *err, size_t err_len, F body) { return guarded_call(err, err_len, body); }

} // namespace tr_native

// The one exception boundary of the C++ shims: no C++ exception may leave them. `guarded` runs
// a body, returns 0, or 1 with the message (libtorch's first line, without its backtrace) copied
// NUL-terminated into `err`.
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstring>
#include <exception>

namespace tr_native {

inline void set_error(char *err, size_t err_len, const char *msg) {
    if (err != nullptr && err_len > 0) {
        std::strncpy(err, msg, err_len - 1);
        err[err_len - 1] = '\0';
    }
}

template <typename F> int guarded(char *err, size_t err_len, F body) {
    try {
        body();
        return 0;
    } catch (const c10::Error &e) {
        set_error(err, err_len, e.what_without_backtrace());
    } catch (const std::exception &e) {
        set_error(err, err_len, e.what());
    } catch (...) {
        set_error(err, err_len, "unknown C++ exception");
    }
    return 1;
}

} // namespace tr_native

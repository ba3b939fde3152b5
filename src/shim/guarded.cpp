// The shims' one exception boundary (guarded.h).
#include "guarded.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <exception>

namespace tr_native {

namespace {
void set_error(char *err, size_t err_len, const char *msg) {
    if (err != nullptr && err_len > 0) {
        std::strncpy(err, msg, err_len - 1);
        err[err_len - 1] = '\0';
    }
}
} // namespace

int caught(char *err, size_t err_len) {
    try {
        throw;
    } catch (const c10::Error &e) {
        set_error(err, err_len, e.what_without_backtrace());
    } catch (const std::exception &e) {
        set_error(err, err_len, e.what());
    } catch (...) {
        set_error(err, err_len, "unknown C++ exception");
    }
    return 1;
}

int guarded_call(char *err, size_t err_len, c10::function_ref<void()> body) {
    try {
        body();
        return 0;
    } catch (...) {
        return caught(err, err_len);
    }
}

} // namespace tr_native

// PyTorch's saved-tensor hooks, pushed only while a call into the library runs. In a Python
// process that imported torch, PyTorch's engine asks each op that saves a tensor for backward for
// the hooks on the top of this thread's stack (at::SavedTensorDefaultHooks, pushed by
// `torch.autograd.graph.saved_tensors_hooks`). The Python binding makes the hooks that hand the
// op table's saved tensors to the manager, pushes them, and has this file take them off the stack
// (`tr_native_python_hooks_adopt`); every C ABI call then pushes them while it runs and takes them
// back after. So they apply to what the library's own ops save, and to nothing of the program's:
// torch's own tensors, and the `tensorref` device's, save as without a manager (autograd's
// in-place check and `torch.func`, which refuses to run under hooks, work there).
//
// The hooks move between the stack and this thread's slot without a copy, so no Python reference
// count changes and no GIL is needed: a C ABI call from ctypes runs without it.
#include "guarded.h"

#include <ATen/SavedTensorHooks.h>

#include <optional>
#include <utility>

using tr_native::guarded;

namespace {

thread_local std::optional<std::pair<c10::SafePyObject, c10::SafePyObject>> adopted;

} // namespace

extern "C" {

// Takes the hooks on the top of this thread's stack (the binding's, pushed just before) into the
// thread's slot.
int tr_native_python_hooks_adopt(char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        TORCH_CHECK(!adopted, "this thread's saved-tensor hooks are adopted already");
        TORCH_CHECK(!at::SavedTensorDefaultHooks::get_tls_state().stack.empty(), "no saved-tensor hooks to adopt");
        adopted.emplace(at::SavedTensorDefaultHooks::pop_hooks());
    });
}

// Pushes the adopted hooks back on this thread's stack (for the binding to pop them, with the GIL,
// as `saved_tensors_hooks` exits). No-op without any.
int tr_native_python_hooks_return(char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        if (adopted) {
            auto hooks = std::move(*adopted);
            adopted.reset();
            at::SavedTensorDefaultHooks::push_hooks(std::move(hooks.first), std::move(hooks.second));
        }
    });
}

// Pushes the adopted hooks for a call into the library: 1 if it did (give them back with
// tr_native_python_hooks_leave), 0 if this thread has none or they are pushed already (a call
// the hooks themselves make), or if the stack refuses hooks now (inside `torch.func`'s transforms
// or `disable_saved_tensors_hooks`: what the library's ops save then stays on the device).
int tr_native_python_hooks_enter(void) noexcept {
    if (!adopted || !at::SavedTensorDefaultHooks::is_enabled()) {
        return 0;
    }
    // Checked above what push_hooks checks (hooks are enabled; Python initialised the stack to
    // push them first), so it can only fail to allocate, which ends the process (noexcept).
    auto hooks = std::move(*adopted);
    adopted.reset();
    at::SavedTensorDefaultHooks::push_hooks(std::move(hooks.first), std::move(hooks.second));
    return 1;
}

// Takes the hooks tr_native_python_hooks_enter pushed back off the stack.
void tr_native_python_hooks_leave(void) noexcept {
    adopted.emplace(at::SavedTensorDefaultHooks::pop_hooks());
}

} // extern "C"

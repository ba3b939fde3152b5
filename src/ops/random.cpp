// Draws that can be made again exactly: dropout's noise, drawn from a clone of the default
// generator whose state before the draw is kept, so the residency manager can drop the noise
// (and what was made from it) and draw the same numbers again later. No C++ exception leaves
// this file (see guarded.h).
#include "guarded.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <memory>
#include <mutex>

using tr_native::guarded;

extern "C" {

// Dropout's noise for `like` (an at::Tensor*), drawn as at::dropout draws it: a tensor like it
// of 1/(1-p) where a Bernoulli(1-p) draw succeeds and 0 elsewhere, written to `*out_noise`.
// With a `snapshot` it draws the same numbers again from it and leaves the default generator
// alone. Without one it draws from the default generator of `like`'s device; where
// `out_snapshot` is not NULL, through a clone (the default generator advances as if it had drawn
// itself; other threads' draws wait meanwhile), and writes the generator as it was before, a new
// at::Generator*, to `*out_snapshot`. With `into`, `like` itself is the noise, drawn in place (a
// remake then allocates nothing else). A meta tensor draws nothing.
int tr_native_dropout_noise(const void *like, int into, double p, const void *snapshot, void **out_noise,
                            void **out_snapshot, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &t = *static_cast<const at::Tensor *>(like);
        auto noise = into != 0 ? t : at::empty_like(t);
        if (out_snapshot != nullptr) {
            *out_snapshot = nullptr;
        }
        if (t.is_meta()) {
            // no data: nothing to draw
        } else if (snapshot != nullptr) {
            noise.bernoulli_(1 - p, static_cast<const at::Generator *>(snapshot)->clone());
        } else if (out_snapshot == nullptr) {
            noise.bernoulli_(1 - p);
        } else {
            auto global = at::globalContext().defaultGenerator(t.device());
            std::lock_guard<std::mutex> lock(global.mutex());
            auto before = std::make_unique<at::Generator>(global.clone());
            auto drawing = global.clone();
            noise.bernoulli_(1 - p, drawing);
            global.set_state(drawing.get_state());
            *out_snapshot = before.release();
        }
        noise.div_(1 - p);
        *out_noise = new at::Tensor(std::move(noise));
    });
}

// Frees a snapshot from tr_native_dropout_noise (NULL is a no-op).
void tr_native_generator_free(void *generator) {
    delete static_cast<at::Generator *>(generator);
}

} // extern "C"

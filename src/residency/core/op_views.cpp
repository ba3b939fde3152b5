// The views of device copies an op's inputs are: one for each input of every op under the
// manager, made before its kernel and let go of after it (by the op table through op_views.rs,
// and by the `tensorref` device's fallback, src/torch_device/kernels.cpp); and the host tensor
// each result is registered as, its home (torch_storage.cpp), which dies with its handle. Made
// new, each is a TensorImpl and a version counter allocated, filled and freed again. Instead,
// each thread keeps a few that died, and makes its next ones from them, pointed at another
// storage: nothing is allocated, and the memory is still in cache.
//
// A view is kept only when nothing else holds it (no other reference, strong or weak) and the op
// left nothing on it: no autograd metadata, names, conjugate, negative or zero bit, or Python
// object. Kept, it holds no storage (so no device memory stays alive through it) and no version
// counter. It is taken again only for a view of its own dtype and device, outside inference mode
// as it was made outside it, so its dispatch keys are those a new view's would be.
// `kept_tensor_over` and `give_back` run inside their callers' exception boundary (`guarded`);
// the one C entry point catches everything.
#include "op_views.h"

#include <c10/core/InferenceMode.h>

#include <vector>

namespace {

struct Idle {
    c10::intrusive_ptr<c10::TensorImpl> impl;
    c10::Device device;
};

// A thread's kept views; a few are enough, as an op has few inputs.
constexpr size_t kKept = 8;
thread_local std::vector<Idle> kept;

// The heap at::Tensors that views and homes cross to Rust in (a tch tensor owns one each), kept
// as they come back through `tr_native_give_back`, empty, for the next ones (`boxed`).
struct Boxes {
    std::vector<at::Tensor *> spare;
    ~Boxes() {
        for (auto *box : spare) {
            delete box;
        }
    }
};
thread_local Boxes boxes;

// What a kept view holds instead of a storage: one empty storage, the thread's own (so that no
// reference count is shared between threads).
const c10::Storage &no_storage() {
    thread_local const c10::Storage empty(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), 0, at::DataPtr(nullptr, at::Device(at::kCPU)), nullptr, false));
    return empty;
}

// Whether the op that had `t` left it as it was made (see above); `t` is defined.
bool untouched(const at::Tensor &t) {
    auto *impl = t.unsafeGetTensorImpl();
    return t.use_count() == 1 && t.weak_use_count() == 1 && impl->allow_tensor_metadata_change() &&
           !impl->is_inference() && impl->autograd_meta() == nullptr &&
           !impl->has_named_tensor_meta() && !impl->has_symbolic_sizes_strides() && !impl->is_conj() &&
           !impl->is_neg() && !impl->_is_zerotensor() && impl->pyobj_slot()->load_pyobj() == nullptr;
}

} // namespace

namespace tr_native {

at::Tensor kept_tensor_over(c10::Storage storage, caffe2::TypeMeta dtype, at::IntArrayRef sizes,
                            at::IntArrayRef strides, int64_t offset) {
    const c10::Device device = storage.device();
    if (!c10::InferenceMode::is_enabled()) {
        for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
            if (it->device == device && it->impl->dtype() == dtype) {
                auto impl = std::move(it->impl);
                kept.erase(std::next(it).base());
                impl->set_storage_keep_dtype(std::move(storage));
                if (impl->sizes() != sizes || impl->strides() != strides || impl->storage_offset() != offset) {
                    impl->set_sizes_and_strides(sizes, strides, offset); // (and what follows from them)
                }
                return at::Tensor(std::move(impl));
            }
        }
    }
    return tensor_over(std::move(storage), dtype, sizes, strides, offset);
}

at::Tensor tensor_over(c10::Storage storage, caffe2::TypeMeta dtype, at::IntArrayRef sizes, at::IntArrayRef strides,
                       int64_t offset) {
    c10::DispatchKeySet keys(c10::computeDispatchKey(c10::typeMetaToScalarType(dtype), at::kStrided, storage.device()));
    auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys, dtype);
    t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
    return t;
}

void counts_versions(const at::Tensor &view, const at::Tensor &like) {
    auto *impl = view.unsafeGetTensorImpl();
    if (view.is_inference()) {
        return;
    }
    if (!like.is_inference()) {
        impl->set_version_counter(like.unsafeGetTensorImpl()->version_counter());
    } else if (!impl->version_counter().enabled()) {
        impl->set_version_counter(c10::VariableVersion(/*version=*/0)); // a kept view has none
    }
}

at::Tensor *boxed(at::Tensor &&t) {
    if (boxes.spare.empty()) {
        return new at::Tensor(std::move(t));
    }
    at::Tensor *box = boxes.spare.back();
    boxes.spare.pop_back();
    *box = std::move(t);
    return box;
}

void give_back(at::Tensor &&view) {
    at::Tensor t = std::move(view);
    if (kept.size() >= kKept || !t.defined() || !untouched(t)) {
        return;
    }
    const c10::Device device = t.device();
    c10::intrusive_ptr<c10::TensorImpl> impl = t.getIntrusivePtr();
    t.reset();
    impl->set_storage_keep_dtype(no_storage());
    impl->set_version_counter(c10::VariableVersion(c10::VariableVersion::DISABLED));
    kept.push_back({std::move(impl), device});
}

} // namespace tr_native

extern "C" {

// `give_back` for a view or home the caller owns as a heap at::Tensor (the op table's, in
// Rust), whose box is kept too where there is room. Where libtorch throws (it cannot, for a view
// that passed `untouched`), the view is simply freed.
void tr_native_give_back(void *t) {
    auto *box = static_cast<at::Tensor *>(t);
    try {
        tr_native::give_back(std::move(*box)); // leaves the box empty
        if (boxes.spare.size() < kKept) {
            boxes.spare.push_back(box);
            return;
        }
    } catch (...) {
    }
    delete box;
}

// How many views this thread keeps now (for tests).
size_t tr_native_op_views_kept() { return kept.size(); }

} // extern "C"

// Storages for the residency manager (src/residency/core/storage.rs): which storage a tensor views,
// whose memory it is, and the host memory ("home") the manager keeps a storage's bytes in.
//
// The manager moves storages, not tensors: every view of one storage shares one home and one
// device copy. A home is the storage's own c10::StorageImpl, so every host tensor viewing it sees
// what the manager puts there. Three things are done to that StorageImpl's memory, each keeping
// every view valid:
// - a lazy home: a StorageImpl with the right byte size and no memory yet, for an op's result
//   that may never leave the device; it gets page-locked memory when it must;
// - pinning once: pageable memory of the library's is copied into page-locked memory, and the
//   StorageImpl takes the new memory (the old memory goes back to the caller, which frees it
//   once no reader can be using it);
// - marking external: memory that code outside the library can reach (a DLPack import or
//   export) gets a deleter of ours wrapped around its own, so the manager knows never to cache
//   it or move it. The data pointer never changes.
//
// Whose memory it is: memory the outside can reach carries the wrapper deleter above (the
// library puts it on every DLPack import and export); all other memory is the library's. Whether
// it is page-locked: the simulated device's deleter, or CUDA's own answer for the pointer.
//
// Tensors cross as `at::Tensor*`, the manager's references to storages as `StorageRef*` into
// Rust's memory; no C++
// exception leaves this file.
#include "guarded.h"
#include "op_views.h"

#include <ATen/ATen.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/accumulate.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

using tr_native::guarded;
using tr_native::tensor_over;

namespace {

// The simulated device's page-locked memory: ordinary memory with a deleter of its own, cached as
// CUDA's caching host allocator caches page-locked blocks (a freed block is kept for the next
// request of its size class, never given back), so that the manager's counter of new page-locked
// allocations reads on the simulated device what it would read on CUDA. Each block starts with a
// 64-byte header holding its size class; the data follows it.
struct SimulatedCache {
    std::mutex lock;
    std::unordered_map<size_t, std::vector<void *>> free;
    uint64_t allocations = 0;
};

SimulatedCache &simulated_cache() {
    static auto *cache = new SimulatedCache; // never destroyed: blocks may be freed at exit
    return *cache;
}

constexpr size_t kHeader = 64;

size_t size_class(size_t nbytes) {
    size_t c = 64;
    while (c < nbytes) {
        c *= 2;
    }
    return c;
}

void simulated_free(void *ctx) {
    size_t c = *static_cast<size_t *>(ctx);
    auto &cache = simulated_cache();
    std::lock_guard<std::mutex> guard(cache.lock);
    cache.free[c].push_back(ctx);
}

at::DataPtr simulated_allocate(size_t nbytes) {
    size_t c = size_class(nbytes);
    auto &cache = simulated_cache();
    void *block = nullptr;
    {
        std::lock_guard<std::mutex> guard(cache.lock);
        auto &blocks = cache.free[c];
        if (!blocks.empty()) {
            block = blocks.back();
            blocks.pop_back();
        } else {
            cache.allocations += 1;
        }
    }
    if (block == nullptr) {
        block = std::aligned_alloc(kHeader, kHeader + c);
        TORCH_CHECK(block != nullptr, "out of host memory allocating ", nbytes, " bytes");
        *static_cast<size_t *>(block) = c;
    }
    return {static_cast<char *>(block) + kHeader, block, &simulated_free, at::Device(at::kCPU)};
}

// CUDA's caching host allocator when `cuda`, else the simulated page-locked memory.
at::DataPtr page_locked(size_t nbytes, bool cuda) {
    return cuda ? at::getHostAllocator(at::kCUDA)->allocate(nbytes) : simulated_allocate(nbytes);
}

struct External {
    std::unique_ptr<void, c10::DeleterFnPtr> original;
};
void external_deleter(void *ctx) { delete static_cast<External *>(ctx); }

// The memory of an alias (tr_native_alias_bytes): the storage it lies in, kept alive.
struct Alias {
    c10::Storage owner;
};
void alias_deleter(void *ctx) { delete static_cast<Alias *>(ctx); }

c10::StorageImpl *impl_of(const void *t) {
    return static_cast<const at::Tensor *>(t)->storage().unsafeGetStorageImpl();
}

// A 1-D byte tensor over all of `storage`.
at::Tensor bytes_over(c10::Storage storage) {
    auto n = static_cast<int64_t>(storage.nbytes());
    return tensor_over(std::move(storage), caffe2::TypeMeta::Make<uint8_t>(), {n}, {1}, 0);
}

// What the manager keeps of a storage, its home or its device copy (StorageRef in
// torch_storage.rs): the StorageImpl, and the version counter every tensor over the storage
// counts with (none for an inference tensor's). No TensorImpl: a byte tensor over the storage is
// made only when its memory is copied. It lives inside the manager's record in Rust's memory
// (two words, built there in place and destroyed there), so keeping one allocates nothing; each
// member is one pointer, which Rust may move as it moves any value.
struct StorageRef {
    c10::Storage storage;
    c10::VariableVersion version; // disabled for an inference tensor's storage

    static StorageRef of(const at::Tensor &t) { return {t.storage(), t.unsafeGetTensorImpl()->version_counter()}; }

    // `t` counts versions with this storage's tensors (see counts_versions).
    void count_versions(const at::Tensor &t) const {
        if (version.enabled() && !t.is_inference()) {
            t.unsafeGetTensorImpl()->set_version_counter(version);
        }
    }

    at::Tensor bytes() const {
        auto t = bytes_over(storage);
        count_versions(t);
        return t;
    }
};
static_assert(sizeof(StorageRef) == 2 * sizeof(void *) && alignof(StorageRef) == alignof(void *),
              "StorageRef in torch_storage.rs is two words");

// Whether `dp` is page-locked host memory: the simulated device's, or, where the manager computes
// on CUDA, host memory CUDA pinned. Only host memory is asked about: CUDA's answer
// (cudaPointerGetAttributes, behind a device guard and a look for a primary context) costs
// microseconds, and every result, gradient and saved tensor the device makes is registered
// through here.
bool is_page_locked(const at::DataPtr &dp, bool cuda) {
    if (dp.get_deleter() == &simulated_free) {
        return true;
    }
    return cuda && dp.device().is_cpu() && at::detail::getCUDAHooks().isPinnedPtr(dp.get());
}

} // namespace

extern "C" {

// What the manager needs to know of the storage a host or device tensor views.
struct tr_native_storage_info {
    uintptr_t id;       // the StorageImpl's address (stable while any tensor views it)
    uint64_t nbytes;    // the storage's size
    int32_t has_memory; // 0 for a lazy home
    int32_t external;   // code outside the library can reach the memory
    int32_t page_locked;
    int32_t holders;    // references to the StorageImpl (tensors viewing it)
};

int tr_native_storage(const void *t, int cuda, tr_native_storage_info *out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        c10::StorageImpl *s = impl_of(t);
        const at::DataPtr &dp = s->_mutable_data_ptr_no_checks();
        out->id = reinterpret_cast<uintptr_t>(s);
        out->nbytes = s->nbytes();
        out->has_memory = dp.get() != nullptr || s->nbytes() == 0;
        out->external = dp.get_deleter() == &external_deleter;
        out->page_locked = is_page_locked(dp, cuda && dp.get() != nullptr);
        out->holders = static_cast<int32_t>(c10::raw::intrusive_ptr::use_count(s));
    });
}

// How many at::Tensor handles share the TensorImpl of `t`. Two registered tensors may share one
// (an op may return one of its inputs: `contiguous` of a contiguous tensor): a dying one holds a
// reference to its storage only if its TensorImpl dies with it.
int32_t tr_native_tensor_holders(const void *t) {
    return static_cast<int32_t>(static_cast<const at::Tensor *>(t)->use_count());
}

// The TensorImpl of `t`: two handles with the same one are one tensor to libtorch's checks.
uintptr_t tr_native_tensor_impl(const void *t) {
    return reinterpret_cast<uintptr_t>(static_cast<const at::Tensor *>(t)->unsafeGetTensorImpl());
}

// Whether `t` is a tensor of libtorch's PrivateUse1 device, which in this process is the
// `tensorref` device (src/torch_device): its storage is one of the manager's already.
int tr_native_on_private_use1(const void *t) {
    const auto &x = *static_cast<const at::Tensor *>(t);
    return x.defined() && x.device().is_privateuseone();
}

// Whether `t` requires grad (false for an undefined tensor). Cannot fail.
int tr_native_requires_grad(const void *t) {
    return static_cast<const at::Tensor *>(t)->requires_grad();
}

int tr_native_is_contiguous(const void *t) {
    return static_cast<const at::Tensor *>(t)->is_contiguous();
}

// A tensor with the dtype, sizes, strides and storage offset of `like`, over the storage (and on
// the device) of `holder`: `like`'s view of another copy of its storage.
int tr_native_view_on(const void *holder, const void *like, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &h = *static_cast<const at::Tensor *>(holder);
        const auto &l = *static_cast<const at::Tensor *>(like);
        TORCH_CHECK(h.storage().nbytes() >= l.storage().nbytes(), "view_on: the storage is smaller than the view's");
        auto view = tensor_over(h.storage(), l.dtype(), l.sizes(), l.strides(), l.storage_offset());
        // One version counter per storage (see tr_native_share_version).
        tr_native::counts_versions(view, h);
        *out = new at::Tensor(std::move(view));
    });
}

// `like`'s view (dtype, sizes, strides, offset) of the device copy whose StorageImpl is `storage`,
// counting versions with `like` (every view of a storage counts with one counter, and the copy's
// is its home's). For an op's input, each of which this reaches on every op: the manager keeps
// the copy's StorageImpl, so no tensor over it is followed there, and `like` is the op's input,
// already at hand: on the per-op path each pointer followed into a cold object is a cache miss.
int tr_native_device_view(uintptr_t storage, const void *like, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &l = *static_cast<const at::Tensor *>(like);
        auto *impl = reinterpret_cast<c10::StorageImpl *>(storage);
        int64_t last = l.storage_offset();
        bool empty = false;
        for (int64_t d = 0; d < l.dim(); ++d) {
            empty |= l.sizes()[d] == 0;
            last += (l.sizes()[d] - 1) * l.strides()[d];
        }
        auto needs = empty ? 0 : (last + 1) * static_cast<int64_t>(l.dtype().itemsize());
        TORCH_CHECK(needs <= static_cast<int64_t>(impl->nbytes()), "device_view: the view needs ", needs,
                    " bytes of a storage of ", impl->nbytes());
        auto view = tr_native::kept_tensor_over(c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(impl)),
                                                l.dtype(), l.sizes(), l.strides(), l.storage_offset());
        tr_native::counts_versions(view, l);
        // The op's kernel reads the data next: asked for now, it is in the cache by then.
        __builtin_prefetch(static_cast<const char *>(impl->data_ptr().get()) + l.storage_offset() * l.dtype().itemsize());
        *out = tr_native::boxed(std::move(view));
    });
}

// A 1-D uint8 tensor of `nbytes` over the memory of `holder`'s storage from byte `offset` on, in a
// StorageImpl of its own that keeps `holder`'s alive: the same device bytes under another storage,
// as two imports of one memory are on the host (src/residency/core/external.rs).
int tr_native_alias_bytes(const void *holder, uint64_t offset, uint64_t nbytes, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &h = *static_cast<const at::Tensor *>(holder);
        at::Storage storage = h.storage();
        TORCH_CHECK(offset + nbytes <= storage.nbytes(), "alias_bytes: bytes ", offset, " to ", offset + nbytes,
                    " lie outside a storage of ", storage.nbytes());
        char *data = static_cast<char *>(storage.mutable_data()) + offset;
        at::DataPtr memory(data, new Alias{storage}, &alias_deleter, storage.device());
        auto impl = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                          std::move(memory), nullptr, /*resizable=*/false);
        *out = new at::Tensor(bytes_over(at::Storage(std::move(impl))));
    });
}

// What the manager keeps of a result `t` (a device tensor) it registers, in one call: its home,
// a host tensor shaped like `t` over a new storage of `t`'s storage size that has no memory yet
// (see tr_native_home_allocate), with `t`'s version counter; and a reference to each storage,
// the home's and `t`'s, built in Rust's memory (no tensor over either: a byte tensor is made when
// its memory moves).
int tr_native_result_home(const void *t, void **out_home, void *out_home_ref, void *out_device_ref, char *err,
                          size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &src = *static_cast<const at::Tensor *>(t);
        auto impl = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), src.storage().nbytes(),
                                                          at::DataPtr(nullptr, at::Device(at::kCPU)), nullptr,
                                                          /*resizable=*/false);
        auto home = tr_native::kept_tensor_over(at::Storage(std::move(impl)), src.dtype(), src.sizes(),
                                                src.strides(), src.storage_offset());
        tr_native::counts_versions(home, src);
        auto *boxed = tr_native::boxed(std::move(home));
        new (out_home_ref) StorageRef(StorageRef::of(*boxed));
        new (out_device_ref) StorageRef(StorageRef::of(src));
        *out_home = boxed;
    });
}

// A reference to the storage of `t`, with `t`'s version counter, built in `*out` (uninitialised
// memory of Rust's).
int tr_native_storage_ref(const void *t, void *out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] { new (out) StorageRef(StorageRef::of(*static_cast<const at::Tensor *>(t))); });
}

// Drops the references of `ref`, whose memory stays Rust's.
void tr_native_storage_ref_drop(void *ref) { std::destroy_at(static_cast<StorageRef *>(ref)); }

// A 1-D uint8 tensor over the whole storage of `ref`, counting versions with its tensors.
int tr_native_storage_ref_bytes(const void *ref, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] { *out = new at::Tensor(static_cast<const StorageRef *>(ref)->bytes()); });
}

// `like`'s view (dtype, sizes, strides, offset) of the storage of `ref`, counting versions with its
// tensors: a registered tensor's view of a storage the manager knows.
int tr_native_storage_ref_view(const void *ref, const void *like, void **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &r = *static_cast<const StorageRef *>(ref);
        const auto &l = *static_cast<const at::Tensor *>(like);
        TORCH_CHECK(r.storage.nbytes() >= l.storage().nbytes(), "view_on: the storage is smaller than the view's");
        auto view = tensor_over(r.storage, l.dtype(), l.sizes(), l.strides(), l.storage_offset());
        r.count_versions(view);
        *out = new at::Tensor(std::move(view));
    });
}

// References to the storage of `ref` (its own, and one for each tensor over the storage).
int32_t tr_native_storage_ref_holders(const void *ref) {
    return static_cast<int32_t>(static_cast<const StorageRef *>(ref)->storage.use_count());
}

// The address of the memory of `ref`'s storage (0 for a lazy home).
uintptr_t tr_native_storage_ref_data(const void *ref) {
    return reinterpret_cast<uintptr_t>(static_cast<const StorageRef *>(ref)->storage.data());
}

// The version of the tensors over `ref`'s storage (0 where they count none: inference tensors).
uint32_t tr_native_storage_ref_version(const void *ref) {
    const auto &r = *static_cast<const StorageRef *>(ref);
    return r.version.enabled() ? r.version.current_version() : 0;
}

// Gives the lazy storage of `home` memory: page-locked (`pinned`), or libtorch's pageable memory.
int tr_native_home_allocate(const void *home, int pinned, int cuda, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        c10::StorageImpl *s = impl_of(home);
        TORCH_CHECK(s->_mutable_data_ptr_no_checks().get() == nullptr, "home_allocate: the storage has memory");
        s->set_data_ptr_noswap(pinned ? page_locked(s->nbytes(), cuda != 0) : c10::GetCPUAllocator()->allocate(s->nbytes()));
    });
}

// Moves the storage of `home` (pageable memory of the library's) into page-locked memory: the
// bytes are copied (unless `copy` is 0: memory never written) and the StorageImpl takes the new
// memory. The old memory is written to `*out_old` as a uint8 tensor that owns it: the caller frees
// it when no reader can still be using it.
int tr_native_home_pin(const void *home, int cuda, int copy, void **out_old, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        c10::StorageImpl *s = impl_of(home);
        auto n = s->nbytes();
        at::DataPtr fresh = page_locked(n, cuda != 0);
        if (copy != 0) {
            std::memcpy(fresh.get(), s->_mutable_data_ptr_no_checks().get(), n);
        }
        at::DataPtr old = s->set_data_ptr(std::move(fresh));
        auto impl = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), n, std::move(old),
                                                          nullptr, /*resizable=*/false);
        *out_old = new at::Tensor(bytes_over(at::Storage(std::move(impl))));
    });
}

// Copies `src` into `dst` (a write-back into a home) without counting it as a write by the
// program: autograd's version counter, shared by every view of the storage, stays.
int tr_native_copy_quiet(const void *dst, const void *src, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        at::AutoDispatchBelowADInplaceOrView quiet;
        at::Tensor target = *static_cast<const at::Tensor *>(dst);
        target.copy_(*static_cast<const at::Tensor *>(src));
    });
}

// Marks the storage of `t` as reachable by code outside the library (a DLPack import or export).
int tr_native_mark_external(const void *t, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        c10::StorageImpl *s = impl_of(t);
        at::DataPtr &dp = s->_mutable_data_ptr_no_checks();
        if (dp.get_deleter() == &external_deleter || dp.get() == nullptr) {
            return;
        }
        void *data = dp.get();
        auto device = dp.device();
        auto *wrapped = new External{std::move(dp.move_context())};
        s->set_data_ptr_noswap(at::DataPtr(data, wrapped, &external_deleter, device));
    });
}

// An uninitialised contiguous host tensor of `dtype` and `sizes`, in page-locked memory (for
// loaders that fill homes directly).
int tr_native_page_locked_empty(const int64_t *sizes, size_t ndim, int dtype, int cuda, void **out, char *err,
                                size_t err_len) {
    return guarded(err, err_len, [&] {
        at::IntArrayRef shape(sizes, ndim);
        auto options = at::TensorOptions().dtype(static_cast<at::ScalarType>(dtype));
        auto n = static_cast<size_t>(c10::multiply_integers(shape)) * options.dtype().itemsize();
        auto impl = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), n,
                                                          page_locked(n, cuda != 0), nullptr, /*resizable=*/false);
        auto t = at::empty({0}, options);
        t.set_(at::Storage(std::move(impl)), 0, shape);
        *out = new at::Tensor(std::move(t));
    });
}

// New page-locked memory allocated so far: blocks CUDA's caching host allocator had to allocate
// (its cache served the other requests in microseconds), or the simulated cache's.
uint64_t tr_native_page_locked_allocations(int cuda) {
    try {
        if (cuda) {
            return static_cast<uint64_t>(at::getHostAllocator(at::kCUDA)->get_stats().num_host_alloc);
        }
        auto &cache = simulated_cache();
        std::lock_guard<std::mutex> guard(cache.lock);
        return cache.allocations;
    } catch (...) {
        return 0;
    }
}

} // extern "C"

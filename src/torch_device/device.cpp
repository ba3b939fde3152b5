// The `tensorref` backend's registration with libtorch: its name, its allocator (a host home per
// storage), its device guard and its hooks. Registered at run time by
// `tr_native_torch_device_register` (mod.rs, `register`), not by static initializers, which a
// linker drops from a static archive that nothing references.
#include "device.h"

#include "guarded.h"
#include "../residency/core/op_views.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

namespace tr_device {

const Callbacks *callbacks = nullptr;

namespace {

// The storage's DataPtr: the home is both its context and its data pointer (the data pointer
// names the storage; its bytes live wherever the manager put them).
void release_home(void *home) { callbacks->release(static_cast<const Entry *>(home)); }

c10::DataPtr home_ptr(const Entry *home) {
    void *p = const_cast<Entry *>(home);
    return c10::DataPtr(p, p, &release_home, c10::Device(kDevice, 0));
}

// Random ops run the compute device's kernels over its copies, with its generator: on the
// simulated device the CPU's, so that a seeded program draws what it draws on the CPU.
struct Hooks final : at::PrivateUse1HooksInterface {
    bool isBuilt() const override { return true; }
    bool isAvailable() const override { return true; }
    bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
    const at::Generator &getDefaultGenerator(c10::DeviceIndex) const override {
        return at::detail::getDefaultCPUGenerator();
    }
    at::Generator getNewGenerator(c10::DeviceIndex) const override { return at::detail::createCPUGenerator(); }
    at::Device getDeviceFromPtr(void *) const override { return c10::Device(kDevice, 0); }
    bool isPinnedPtr(const void *) const override { return false; }
    c10::Allocator *getPinnedMemoryAllocator() const override { return at::getCPUAllocator(); }
};

// CUDA's caching allocator, where the device computes on CUDA.
c10::DeviceAllocator *cuda_allocator() {
    return callbacks->accelerator() < 0 ? nullptr : dynamic_cast<c10::DeviceAllocator *>(c10::GetAllocator(c10::kCUDA));
}

// A storage's memory is a host home (`allocate`). As libtorch's device allocator it reports the
// manager's memory, which `torch.accelerator`'s memory functions read: allocated, the bytes of
// the manager's device copies (its peak restarted by resetting the peak stats); reserved, CUDA's
// caching allocator's (the allocated bytes on the simulated device, which keeps no cache); the
// memory's total, the budget (else the compute device's memory), its free part what the copies
// leave of it. Emptying the cache empties CUDA's.
struct HomeAllocator final : c10::DeviceAllocator {
    c10::DataPtr allocate(size_t nbytes) override {
        at::Tensor host = at::empty({static_cast<int64_t>(nbytes)}, at::TensorOptions().dtype(at::kByte));
        return home_ptr(callbacks->adopt(new at::Tensor(std::move(host))));
    }
    c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
    void copy_data(void *, const void *, std::size_t) const override {
        TORCH_CHECK(false, "tensorref storages are copied by ops (copy_), not byte for byte");
    }

    bool initialized() override { return true; }
    void emptyCache(c10::MempoolId_t pool) override {
        if (auto *cuda = cuda_allocator()) {
            cuda->emptyCache(pool);
        }
    }
    void recordStream(const c10::DataPtr &, c10::Stream) override {} // one stream (Guard)
    c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex) override {
        const Memory m = memory(false);
        c10::CachingDeviceAllocator::DeviceStats stats;
        const auto all = static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
        for (auto *stat : {&stats.allocated_bytes[all], &stats.active_bytes[all], &stats.requested_bytes[all]}) {
            stat->current = static_cast<int64_t>(m.allocated);
            stat->peak = static_cast<int64_t>(m.peak_allocated);
        }
        const bool cuda = callbacks->accelerator() >= 0;
        stats.reserved_bytes[all].current = static_cast<int64_t>(cuda ? m.reserved : m.allocated);
        stats.reserved_bytes[all].peak = static_cast<int64_t>(cuda ? m.peak_reserved : m.peak_allocated);
        return stats;
    }
    void resetAccumulatedStats(c10::DeviceIndex) override {}
    void resetPeakStats(c10::DeviceIndex) override { memory(true); }
    std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex) override {
        const Memory m = memory(false);
        size_t total = m.budget;
        if (total == 0) {
            auto *cuda = cuda_allocator();
            total = cuda != nullptr ? cuda->getMemoryInfo(static_cast<c10::DeviceIndex>(callbacks->accelerator())).second
                                    : static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
        }
        return {total > m.allocated ? total - m.allocated : 0, total};
    }

  private:
    static Memory memory(bool restart_peak) {
        Memory m{};
        TORCH_CHECK(callbacks->memory(restart_peak ? 1 : 0, &m) == 0,
                    "the tensorref device's memory cannot be read from inside a residency event callback");
        return m;
    }
};

// The compute device's current stream where the device computes on CUDA (which every op's
// kernel runs on), with CUDA's guard; none on the simulated device.
std::optional<std::pair<const c10::impl::DeviceGuardImplInterface *, c10::Stream>> cuda_stream() {
    const int index = callbacks == nullptr ? -1 : callbacks->accelerator();
    if (index < 0) {
        return std::nullopt;
    }
    const auto *cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    return std::make_pair(cuda, cuda->getStream(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index))));
}

// An event of the device: where it computes on CUDA, CUDA's event recorded on CUDA's stream;
// on the simulated device, where work is done when its op returns, the time it was recorded.
struct Event {
    void *cuda = nullptr;        // CUDA's event, once recorded there
    c10::DeviceIndex index = -1; // its CUDA device
    bool on_cuda = false;        // last recorded on CUDA (else at `at`)
    std::chrono::steady_clock::time_point at;
};

// One device, one stream. Every op runs its kernel on the compute device's current stream (the
// manager orders its own copies against it with CUDA events), so work on this device is already
// in order, and an event here stands for all the work queued before it. Waiting for the device
// (`torch.accelerator.synchronize()`, a stream's or an event's `synchronize`) waits for that
// stream on CUDA, as a timer stopped after it expects; on the simulated device work is done when
// the op returns. Two events time what ran between them (`elapsed_time`): CUDA's events on CUDA,
// the host's clock on the simulated device.
struct Guard final : c10::impl::DeviceGuardImplInterface {
    c10::DeviceType type() const override { return kDevice; }
    c10::Device exchangeDevice(c10::Device d) const override {
        check(d);
        return c10::Device(kDevice, 0);
    }
    c10::Device getDevice() const override { return c10::Device(kDevice, 0); }
    void setDevice(c10::Device d) const override { check(d); }
    void uncheckedSetDevice(c10::Device) const noexcept override {}
    c10::Stream getStream(c10::Device) const override { return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDevice, 0)); }
    c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
    c10::Stream getNewStream(c10::Device d, int) const override { return getStream(d); }
    c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
    c10::Stream exchangeStream(c10::Stream s) const override { return getStream(s.device()); }
    c10::DeviceIndex deviceCount() const noexcept override { return 1; }
    void record(void **event, const c10::Stream &, const c10::DeviceIndex, const c10::EventFlag flag) const override {
        auto *e = *event != nullptr ? static_cast<Event *>(*event) : new Event();
        *event = e;
        const auto cuda = cuda_stream();
        e->on_cuda = cuda.has_value();
        if (cuda) {
            TORCH_CHECK(e->cuda == nullptr || e->index == cuda->second.device_index(), "a tensorref event recorded on another CUDA device");
            e->index = cuda->second.device_index();
            cuda->first->record(&e->cuda, cuda->second, e->index, flag);
        } else {
            e->at = std::chrono::steady_clock::now();
        }
    }
    void block(void *event, const c10::Stream &) const override {
        const auto *e = static_cast<const Event *>(event);
        const auto cuda = cuda_stream();
        if (e != nullptr && e->on_cuda && cuda) {
            cuda->first->block(e->cuda, cuda->second);
        }
    }
    bool queryEvent(void *event) const override {
        const auto *e = static_cast<const Event *>(event);
        return e == nullptr || !e->on_cuda || cuda_guard()->queryEvent(e->cuda);
    }
    void destroyEvent(void *event, const c10::DeviceIndex) const noexcept override {
        auto *e = static_cast<Event *>(event);
        if (e != nullptr && e->cuda != nullptr) {
            cuda_guard()->destroyEvent(e->cuda, e->index);
        }
        delete e;
    }
    bool queryStream(const c10::Stream &) const override {
        const auto cuda = cuda_stream();
        return !cuda || cuda->first->queryStream(cuda->second);
    }
    void synchronizeStream(const c10::Stream &) const override {
        if (const auto cuda = cuda_stream()) {
            cuda->first->synchronizeStream(cuda->second);
        }
    }
    void synchronizeEvent(void *event) const override {
        const auto *e = static_cast<const Event *>(event);
        if (e != nullptr && e->on_cuda) {
            cuda_guard()->synchronizeEvent(e->cuda);
        }
    }
    void synchronizeDevice(const c10::DeviceIndex) const override { synchronizeStream(getStream(getDevice())); }
    // The dtypes the compute device's kernels take (`torch.accelerator.get_device_capability()`).
    c10::DeviceCapability getDeviceCapability(c10::Device) const override {
        const auto cuda = cuda_stream();
        return cuda ? cuda->first->getDeviceCapability(cuda->second.device()) : c10::DeviceCapability();
    }
    void recordDataPtrOnStream(const c10::DataPtr &, const c10::Stream &) const override {}
    double elapsedTime(void *start, void *end, const c10::DeviceIndex) const override {
        const auto *a = static_cast<const Event *>(start);
        const auto *b = static_cast<const Event *>(end);
        TORCH_CHECK(a != nullptr && b != nullptr, "elapsed_time: both events must be recorded first");
        TORCH_CHECK(a->on_cuda == b->on_cuda, "elapsed_time: one event was recorded on CUDA, the other on the simulated device");
        if (a->on_cuda) {
            return cuda_guard()->elapsedTime(a->cuda, b->cuda, a->index);
        }
        return std::chrono::duration<double, std::milli>(b->at - a->at).count();
    }

  private:
    static void check(c10::Device d) {
        TORCH_CHECK(d.type() == kDevice && d.index() <= 0, "the tensorref device has one index, 0; not ", d);
    }
    static const c10::impl::DeviceGuardImplInterface *cuda_guard() { return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA); }
};

} // namespace

// `view` with the conjugate and negative bits of `t` (a view with either is never kept for
// another op: op_views.cpp).
static at::Tensor with_bits_of(at::Tensor view, const at::Tensor &t) {
    if (t.is_conj()) {
        view._set_conj(true);
    }
    if (t.is_neg()) {
        view._set_neg(true);
    }
    return view;
}

const Entry *home_of(const at::Tensor &t) {
    const c10::DataPtr &p = t.storage().data_ptr();
    TORCH_CHECK(p.get_deleter() == &release_home,
                "a tensorref tensor whose storage the library did not make: a tensor over a tensorref data pointer (from_blob, "
                "as pickle and legacy torch.save make to copy a storage) has no memory to read; move the tensor to the CPU "
                "first (.cpu()), or save it with torch.save");
    return static_cast<const Entry *>(p.get_context());
}

at::Tensor unheld_home(const at::Tensor &t) {
    void *out = nullptr;
    char err[512] = {0};
    TORCH_CHECK(callbacks->unheld_home(home_of(t), &t, &out, err, sizeof err) == 0, err);
    if (out == nullptr) {
        return at::Tensor();
    }
    auto *view = static_cast<at::Tensor *>(out);
    at::Tensor home = std::move(*view);
    delete view;
    return with_bits_of(std::move(home), t);
}

c10::Allocator *allocator() {
    static HomeAllocator homes;
    return &homes;
}

c10::Storage storage_over(const Entry *home, size_t nbytes) {
    return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes, home_ptr(home),
                                                              allocator(), /*resizable=*/true));
}

at::Tensor tensor_over(c10::Storage storage, const at::Tensor &like) {
    auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                      like.dtype());
    t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
    return with_bits_of(std::move(t), like);
}

void grow(const c10::Storage &storage, const c10::Storage &grown) {
    c10::StorageImpl *impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    impl->set_data_ptr_noswap(grown.unsafeGetStorageImpl()->set_data_ptr(c10::DataPtr(nullptr, grown.device())));
    impl->set_nbytes(grown.nbytes());
}

void Attempt::writes(const at::Tensor &t) { written_.push_back(t.storage().unsafeGetStorageImpl()); }

at::Tensor Attempt::acquire(const at::Tensor &t) {
    const c10::StorageImpl *storage = t.storage().unsafeGetStorageImpl();
    const bool write = std::find(written_.begin(), written_.end(), storage) != written_.end();
    void *out = nullptr;
    if (callbacks->acquire(ticket_, home_of(t), &t, write ? 1 : 0, &out) != 0) {
        throw RustFailed{};
    }
    auto *view = static_cast<at::Tensor *>(out);
    at::Tensor copy = std::move(*view);
    delete view;
    if (!write) {
        return with_bits_of(std::move(copy), t);
    }
    auto found = std::find_if(aliases_.begin(), aliases_.end(), [&](const auto &a) { return a.first == storage; });
    if (found == aliases_.end()) {
        // Over the copy's memory, keeping the copy alive; resizable, with the compute device's
        // allocator, as the kernel expects of an out= argument's storage.
        c10::Storage shared = copy.storage();
        auto keep = new c10::Storage(shared);
        c10::DataPtr memory(shared.mutable_data(), keep, [](void *p) { delete static_cast<c10::Storage *>(p); }, shared.device());
        aliases_.emplace_back(storage, c10::Storage(c10::make_intrusive<c10::StorageImpl>(
                                           c10::StorageImpl::use_byte_size_t(), shared.nbytes(), std::move(memory),
                                           at::GetAllocator(shared.device().type()), /*resizable=*/true)));
        found = aliases_.end() - 1;
    }
    auto alias = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(found->second), copy.key_set(), copy.dtype());
    alias.unsafeGetTensorImpl()->set_sizes_and_strides(copy.sizes(), copy.strides(), copy.storage_offset());
    tr_native::give_back(std::move(copy));
    return with_bits_of(std::move(alias), t);
}

bool Attempt::recomputes() const { return callbacks->recomputes(ticket_) != 0; }

bool Attempt::reserves() const { return callbacks->reserves(ticket_) != 0; }

void Attempt::reserve(uint64_t bytes) {
    if (callbacks->reserve(ticket_, bytes) != 0) {
        throw RustFailed{};
    }
}

std::vector<at::Tensor> Attempt::place(c10::ArrayRef<at::Tensor> results, std::unique_ptr<Replay> replay,
                                       const std::vector<at::Tensor> &inputs) {
    c10::SmallVector<const void *, 4> ptrs;
    for (const auto &r : results) {
        ptrs.push_back(&r);
    }
    c10::SmallVector<const Entry *, 4> homes(results.size(), nullptr);
    c10::SmallVector<const Entry *, 4> input_homes;
    c10::SmallVector<const void *, 4> likes;
    for (const auto &in : inputs) {
        input_homes.push_back(home_of(in));
        likes.push_back(&in);
    }
    RecipeIn recipe{replay.release(), input_homes.data(), likes.data(), inputs.size()};
    if (callbacks->place(ticket_, ptrs.data(), ptrs.size(), recipe.replay ? &recipe : nullptr, homes.data()) != 0) {
        throw RustFailed{};
    }
    std::vector<at::Tensor> placed;
    placed.reserve(results.size());
    for (size_t i = 0; i < results.size(); ++i) {
        placed.push_back(tensor_over(storage_over(homes[i], results[i].storage().nbytes()), results[i]));
    }
    return placed;
}

void Attempt::end() {
    if (callbacks->end(ticket_) != 0) {
        throw RustFailed{};
    }
}

} // namespace tr_device

// A tensor of this device over `home`'s storage (whose reference it takes), with the dtype and
// geometry of `like` (a host tensor over that storage): a new `c10::TensorImpl*` reference.
extern "C" int tr_native_torch_device_tensor(const tr_device::Entry *home, const void *like, void **out_impl, char *err,
                                             size_t err_len) {
    c10::Storage storage; // once made, owns the home's reference, also if what follows throws
    return tr_native::guarded(err, err_len, [&] {
        const auto &l = *static_cast<const at::Tensor *>(like);
        storage = tr_device::storage_over(home, l.storage().nbytes());
        *out_impl = tr_device::tensor_over(std::move(storage), l).unsafeReleaseTensorImpl();
    });
}

// Drops one reference to `tensor_impl` (from tr_native_torch_device_tensor).
extern "C" void tr_native_torch_device_tensor_release(void *tensor_impl) {
    c10::intrusive_ptr<c10::TensorImpl>::reclaim(static_cast<c10::TensorImpl *>(tensor_impl)); // dropped here
}

// The home of the storage of `t` (an `at::Tensor*` of this device), borrowed.
extern "C" int tr_native_torch_device_home(const void *t, const tr_device::Entry **home, char *err, size_t err_len) {
    return tr_native::guarded(err, err_len, [&] { *home = tr_device::home_of(*static_cast<const at::Tensor *>(t)); });
}

extern "C" int tr_native_torch_device_register(const tr_device::Callbacks *cb, char *err, size_t err_len) {
    return tr_native::guarded(err, err_len, [&] {
        tr_device::callbacks = cb;
        c10::register_privateuse1_backend("tensorref");
        c10::SetAllocator(tr_device::kDevice, tr_device::allocator());
        static c10::impl::DeviceGuardImplRegistrar guard(tr_device::kDevice, new tr_device::Guard());
        // With the backend named, libtorch asks its hooks (torch::manual_seed does): they come
        // with it. They make it libtorch's accelerator, which costs plain CUDA autograd in this
        // process (pytorch/pytorch#161129; docs/residency.md).
        at::RegisterPrivateUse1HooksInterface(new tr_device::Hooks());
        tr_device::register_kernels();
        tr_device::register_recurrent_cells();
        tr_device::register_autocast();
    });
}

// The simulated device's memory, counted where it is allocated (src/residency/device/memory.rs).
//
// The simulated device's copies are host memory from libtorch's CPU allocator. A counting
// allocator wraps that allocator; what a thread allocates while its mode says "device" is device
// memory: counted live until freed, with the highest count seen. Two device modes:
// - count: a load or a remake, whose room the manager made under its lock beforehand;
// - kernel: an op's kernel, running outside the manager's lock. Before the memory exists, the
//   manager is asked for room for it (`room`, given by the Rust side); a refusal is a libtorch
//   error out of the allocation, and the kernel fails before anything is over budget. Until the
//   manager takes a block as a storage of its own (`adopt`), its bytes are "in flight": the
//   manager counts them against the budget beside its storages, per thread too, so that an op
//   knows what it holds itself.
// - unasked: an op's kernel where the device allocates as CUDA's does (the manager reserved room
//   for its outputs beforehand): counted as `count` is, and what the kernel allocates beyond its
//   outputs (its scratch, which on CUDA is outside the budget) is measured (`scratch_peak`).
// Every other allocation goes straight to the wrapped allocator. A counted block is the wrapped
// allocator's memory with a deleter of ours, found by its data pointer (libtorch's raw_allocate
// needs the pointer and the DataPtr's context to be one), and freed by the wrapped allocator's own
// raw deleter.
//
// Tensors cross as `at::Tensor*`. No C++ exception leaves the extern "C" functions; a refusal of
// room is thrown inside libtorch's own call to the allocator, which reports it as the op's error.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace {

enum Mode : int { kHost = 0, kCount = 1, kKernel = 2, kUnasked = 3 };

// A block this small is a number, not device memory: libtorch wraps an op's scalar arguments in
// 0-dim CPU tensors, which on CUDA stay host memory. (A 0-dim result the manager keeps is still
// counted in its books.)
constexpr size_t kScalarBytes = 16;

// Bytes in flight on one thread (shared with the blocks it allocated, which may be freed on
// another thread after it ended), and what its kernels allocated that is still alive, adopted or
// not: a remake of a result needs room for all of it (a tensor autograd saved during the op, a
// dropout's noise, is adopted at once, but a remake under no-grad keeps it as scratch).
struct Flight {
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> generation{0}; // the running kernel's (tr_native_device_kernel_peak)
    std::atomic<uint64_t> alive{0};      // allocated by it and not freed
    uint64_t peak = 0;                   // the most alive at once (its own thread's only)
};

thread_local int mode = kHost;
thread_local std::shared_ptr<Flight> mine = std::make_shared<Flight>();
// Bytes at the start of this thread's next counted block that are no device memory: the padding
// before a simulated copy's data that keeps its home's alignment (tr_native_device_lead).
thread_local uint64_t lead = 0;

std::atomic<uint64_t> live{0};
std::atomic<uint64_t> peak{0};
std::atomic<uint64_t> in_flight{0};
std::atomic<uint64_t> scratch_peak{0}; // the most a kernel allocated beyond its outputs at once

using RoomFn = int (*)(uint64_t bytes);
std::atomic<RoomFn> room_fn{nullptr};

// A counted block: its bytes, and the thread whose kernel allocated it until the manager adopts
// it (none for a load).
struct Block {
    uint64_t bytes;
    std::shared_ptr<Flight> flight;
    std::shared_ptr<Flight> kernel; // the thread whose kernel allocated it, until it is freed
    uint64_t generation = 0;        // that thread's generation then
};

// Counted blocks by data pointer. The data pointer is also the DataPtr's context, as libtorch's
// raw_allocate and raw_deallocate require of the CPU allocator.
std::mutex blocks_lock;
std::unordered_map<void *, Block> &blocks() {
    static auto *map = new std::unordered_map<void *, Block>; // never destroyed: freed at exit
    return *map;
}

c10::DeleterFnPtr inner_free = nullptr;

} // namespace

// Counts `n` bytes in flight on this thread before they are allocated: the manager calls it
// under its lock as it grants a kernel room, so that no other thread is granted the same room.
extern "C" void tr_native_device_reserve(uint64_t n) {
    mine->bytes += n;
    in_flight += n;
}

// The most this thread's kernels allocated since the last call had alive at once (adopted as
// storages or not): what a kernel allocated at its peak, its result and scratch. Starts a new
// generation: blocks allocated before no longer count, freed or not.
extern "C" uint64_t tr_native_device_kernel_peak() {
    uint64_t most = mine->peak;
    mine->generation += 1;
    mine->alive = 0;
    mine->peak = 0;
    return most;
}

namespace {

void land(Block &b) {
    if (b.flight) {
        b.flight->bytes -= b.bytes;
        in_flight -= b.bytes;
        b.flight.reset();
    }
}

void free_block(void *data) {
    {
        std::lock_guard<std::mutex> guard(blocks_lock);
        auto it = blocks().find(data);
        if (it != blocks().end()) {
            live -= it->second.bytes;
            land(it->second);
            const Block &b = it->second;
            if (b.kernel && b.kernel->generation.load() == b.generation) {
                b.kernel->alive -= b.bytes;
            }
            blocks().erase(it);
        }
    }
    inner_free(data);
}

struct Counting final : c10::Allocator {
    c10::Allocator *inner;
    explicit Counting(c10::Allocator *inner) : inner(inner) {}

    c10::DataPtr allocate(size_t n) override {
        int m = mode;
        uint64_t skip = std::exchange(lead, 0);
        if (m == kHost || n <= kScalarBytes) {
            return inner->allocate(n);
        }
        uint64_t counted = n - std::min<uint64_t>(skip, n);
        Block b{counted, nullptr};
        if (m == kKernel) {
            RoomFn room = room_fn.load();
            mode = kHost; // the manager's own allocations are host memory
            int refused = room == nullptr ? 0 : room(n); // reserves: see tr_native_device_reserve
            mode = m;
            TORCH_CHECK(refused == 0, "the residency manager has no room for ", n, " device bytes");
            if (room == nullptr) {
                tr_native_device_reserve(n);
            }
            b.flight = mine;
            b.kernel = mine;
            b.generation = mine->generation.load();
        }
        c10::DataPtr got;
        try {
            got = inner->allocate(n);
        } catch (...) {
            land(b);
            throw;
        }
        c10::Device device = got.device();
        void *data = got.release_context();
        if (m == kUnasked) {
            b.kernel = mine;
            b.generation = mine->generation.load();
        }
        if (m == kKernel || m == kUnasked) {
            uint64_t alive = mine->alive += counted;
            mine->peak = std::max(mine->peak, alive);
        }
        {
            std::lock_guard<std::mutex> guard(blocks_lock);
            blocks().emplace(data, std::move(b));
        }
        uint64_t now = live += counted;
        uint64_t seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        return {data, data, &free_block, device};
    }

    c10::DeleterFnPtr raw_deleter() const override {
        return &free_block;
    }

    void copy_data(void *dest, const void *src, std::size_t count) const override {
        default_copy_data(dest, src, count);
    }
};

} // namespace

extern "C" {

// Puts the counting allocator in front of libtorch's CPU allocator (once) and gives it the
// manager's room function.
void tr_native_device_memory_install(RoomFn room) {
    static Counting *counting = []() -> Counting * {
        c10::Allocator *cpu = c10::GetCPUAllocator();
        inner_free = cpu->raw_deleter();
        if (inner_free == nullptr) {
            return nullptr; // memory it could not free by pointer: nothing is counted
        }
        auto *c = new Counting(cpu); // never destroyed: blocks outlive exit
        c10::SetCPUAllocator(c, UINT8_MAX);
        return c;
    }();
    (void)counting;
    room_fn.store(room);
}

// The first `n` bytes of this thread's next counted block are no device memory (see `lead`).
void tr_native_device_lead(uint64_t n) {
    lead = n;
}

// A kernel allocated `n` bytes beyond its outputs at its peak (in the unasked mode).
void tr_native_device_scratch(uint64_t n) {
    uint64_t seen = scratch_peak.load();
    while (n > seen && !scratch_peak.compare_exchange_weak(seen, n)) {
    }
}

// Sets this thread's mode; returns the previous one.
int tr_native_device_mode(int to) {
    int was = mode;
    mode = to;
    return was;
}

// Device bytes alive, the highest count since the last reset (which starts it from now), in
// flight in all, in flight on this thread, and the most scratch of a kernel since the last reset.
void tr_native_device_memory(uint64_t *out, int reset_peak) {
    out[0] = live.load();
    out[1] = peak.load();
    out[2] = in_flight.load();
    out[3] = mine->bytes.load();
    out[4] = scratch_peak.load();
    if (reset_peak) {
        peak.store(live.load());
        scratch_peak.store(0);
    }
}

// The manager takes the memory of `t`'s storage as one of its storages: no longer in flight.
void tr_native_device_adopt(const at::Tensor *t) {
    const c10::DataPtr &ptr = t->storage().data_ptr();
    if (ptr.get_deleter() != &free_block) {
        return;
    }
    std::lock_guard<std::mutex> guard(blocks_lock);
    auto it = blocks().find(ptr.get());
    if (it != blocks().end()) {
        land(it->second);
    }
}

} // extern "C"

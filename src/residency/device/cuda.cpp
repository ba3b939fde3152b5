// Asynchronous copies for the residency manager on CUDA (src/residency/device/cuda.rs).
//
// Mechanism: two side streams per device, one for loads and one for write-backs, taken once from
// c10's stream pool and ordered against the compute stream (the device's current stream, where
// libtorch queues kernels) with c10 events;
// `record_stream` makes freeing stream-safe. Why this one: tch exposes no streams, and c10's
// device-generic Stream / Event / DeviceGuardImplInterface are what torch.cuda.Stream itself
// wraps. They need no CUDA headers (this file builds against every wheel, and is never called
// without CUDA), they cooperate with the caching allocator through record_stream, and a copy on
// a side stream runs on a copy engine while kernels run on the compute stream. Two, because the
// link is full duplex and the device has a copy engine for each direction: a training step
// writes activations home while it loads others, and on one stream each would wait for the other.
//
// Tensors cross as `at::Tensor*` (tch's Tensor::as_ptr / from_ptr). No C++ exception leaves
// this file: failures return 1 and copy the message into `err`.
#include "guarded.h"

#include <ATen/ATen.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

using tr_native::guarded;

namespace {

const c10::impl::DeviceGuardImplInterface *cuda() {
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

enum class Direction : size_t { ToDevice = 0, ToHost = 1 };

// A device's side stream for copies in one direction. Copies in one direction are ordered on
// their stream; a load of a home whose write-back may still be running is queued behind it on the
// write-back stream (tr_native_load_async's `after_write`), so that the loads after it do not wait.
c10::Stream side_stream(c10::Device device, Direction direction) {
    static std::mutex lock;
    static std::vector<std::array<std::optional<c10::Stream>, 2>> streams;
    std::lock_guard<std::mutex> guard(lock);
    auto index = static_cast<size_t>(device.index());
    if (streams.size() <= index) {
        streams.resize(index + 1);
    }
    auto &stream = streams[index][static_cast<size_t>(direction)];
    if (!stream) {
        stream = cuda()->getStreamFromGlobalPool(device, /*isHighPriority=*/false);
    }
    return *stream;
}

// Makes `later` wait for the work queued on `earlier` so far.
void order(const c10::Stream &earlier, const c10::Stream &later) {
    c10::Event event(c10::DeviceType::CUDA);
    event.record(earlier);
    event.block(later);
}

} // namespace

extern "C" {

// Starts copying the host tensor `host` to CUDA device `index`: on the load stream, or with
// `after_write` (the home's write-back may still be running) on the write-back stream behind it.
// Writes the new device tensor (`new at::Tensor`, freed by tch) and an event marking the copy's
// end (free it with tr_native_event_free). The data may not be used before tr_native_copy_wait.
int tr_native_load_async(const void *host, int index, int after_write, void **out_tensor, void **out_event, char *err,
                         size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &src = *static_cast<const at::Tensor *>(host);
        c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
        c10::Stream side = side_stream(device, after_write != 0 ? Direction::ToHost : Direction::ToDevice);
        at::Tensor dst;
        {
            c10::StreamGuard on_side(side); // allocation and copy both belong to the side stream
            dst = src.to(device, /*non_blocking=*/true, /*copy=*/true);
        }
        auto *done = new c10::Event(c10::DeviceType::CUDA);
        done->record(side);
        *out_tensor = new at::Tensor(std::move(dst));
        *out_event = done;
    });
}

// Makes the compute stream wait for the copy `event` marks, and tells the caching allocator that
// `tensor` is used on the compute stream (so its memory is not reused before that work ends).
// Where the copy has not ended yet, the wait is timed: `*out_stall` gets a pair of timing events
// recorded on the compute stream around it (tr_native_stall_ns reads how long the stream
// stalled; free it with tr_native_stall_free); else it gets NULL (the stream cannot wait).
int tr_native_copy_wait(void *event, const void *tensor, void **out_stall, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &t = *static_cast<const at::Tensor *>(tensor);
        c10::Stream compute = cuda()->getStream(t.device());
        auto *copied = static_cast<c10::Event *>(event);
        *out_stall = nullptr;
        if (copied->query()) {
            copied->block(compute);
        } else {
            auto *stall = new std::array<c10::Event, 2>{c10::Event(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT),
                                                        c10::Event(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT)};
            (*stall)[0].record(compute);
            copied->block(compute);
            (*stall)[1].record(compute);
            *out_stall = stall;
        }
        t.record_stream(compute);
    });
}

// How long the compute stream waited at a timed wait (tr_native_copy_wait's `out_stall`): the
// time between the end of the work queued before the wait and the end of the wait, in
// nanoseconds. Returns 1 and writes it once both have happened, 0 while they have not.
int tr_native_stall_ns(void *stall, uint64_t *out_ns) {
    try {
        auto &pair = *static_cast<std::array<c10::Event, 2> *>(stall);
        if (!pair[1].query()) {
            return 0;
        }
        *out_ns = static_cast<uint64_t>(pair[0].elapsedTime(pair[1]) * 1e6); // milliseconds
        return 1;
    } catch (...) {
        *out_ns = 0;
        return 1; // an unreadable timer counts nothing rather than being asked again
    }
}

void tr_native_stall_free(void *stall) {
    delete static_cast<std::array<c10::Event, 2> *>(stall);
}

void tr_native_event_free(void *event) {
    delete static_cast<c10::Event *>(event);
}

// Starts copying the device tensor `device_tensor` into the host tensor `host` on the write-back
// stream, after the compute work queued so far, and writes an event marking the copy's end to
// `*out_event` (free it with tr_native_event_free). The host copy may not be read before that
// event has completed (tr_native_event_synchronize). The device tensor may be freed right away:
// record_stream keeps its memory until the copy ends, and CUDA's caching host allocator keeps a
// page-locked destination until then too.
int tr_native_write_back_async(const void *device_tensor, const void *host, void **out_event, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto &src = *static_cast<const at::Tensor *>(device_tensor);
        auto dst = *static_cast<const at::Tensor *>(host);
        c10::Stream side = side_stream(src.device(), Direction::ToHost);
        order(cuda()->getStream(src.device()), side);
        auto *done = new c10::Event(c10::DeviceType::CUDA);
        {
            c10::StreamGuard on_side(side);
            // The manager's copy, not a write by the program: autograd's version counter stays.
            at::AutoDispatchBelowADInplaceOrView quiet;
            dst.copy_(src, /*non_blocking=*/true);
            src.record_stream(side);
            done->record(side);
        }
        *out_event = done;
    });
}

// Writes an event marking the end of the work queued so far on device `index`'s compute stream
// (its current stream), or with `write_back` on its write-back stream (free it with
// tr_native_event_free). Recorded as a tensor used on that stream is freed, it completes with the
// event the caching allocator records then (record_stream), after which the allocator may give the
// tensor's memory to another allocation.
int tr_native_stream_event(int index, int write_back, void **out_event, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index));
        auto *done = new c10::Event(c10::DeviceType::CUDA);
        done->record(write_back != 0 ? side_stream(device, Direction::ToHost) : cuda()->getStream(device));
        *out_event = done;
    });
}

// Blocks the calling thread until the copy `event` marks has ended.
int tr_native_event_synchronize(void *event, char *err, size_t err_len) {
    return guarded(err, err_len, [&] { static_cast<c10::Event *>(event)->synchronize(); });
}

// 1 if the copy `event` marks has ended, 0 if not (without waiting).
int tr_native_event_query(void *event) {
    try {
        return static_cast<c10::Event *>(event)->query() ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

// Gives CUDA's caching allocator's unused blocks on device `index` back and starts its peaks
// anew from what is in use: the reserved peak read next is what follows alone.
int tr_native_cuda_reset_peak(int64_t index, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        auto *allocator = c10::getDeviceAllocator(c10::DeviceType::CUDA);
        if (!allocator->initialized()) {
            return; // nothing allocated yet: no cache, no peak
        }
        allocator->emptyCache();
        allocator->resetPeakStats(static_cast<c10::DeviceIndex>(index));
    });
}

// The bytes CUDA's caching allocator holds on device `index` (in use or cached for reuse), now
// and at their peak, through c10's device-generic allocator interface.
int tr_native_cuda_reserved(int64_t index, uint64_t *now, uint64_t *peak, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        auto stats = c10::getDeviceAllocator(c10::DeviceType::CUDA)->getDeviceStats(static_cast<c10::DeviceIndex>(index));
        const auto &reserved = stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
        *now = static_cast<uint64_t>(reserved.current);
        *peak = static_cast<uint64_t>(reserved.peak);
    });
}

} // extern "C"

// Scenario (b) through the C++ binding: a stack of linear layers whose weights are 4x the device
// budget runs under the Flow policy, inside a tr::Residency.
//
// The same scenario, ops and order as examples/c/flow_stack.c (and examples/flow_stack.rs), so
// the two print the same table: 8 layers of 256x256 f32 weights (2 MiB) under a 512 KiB budget, a
// 64x256 input, h = relu(h) @ w per layer, seed 0, inference (tr::NoGradGuard). Each forward pass
// runs in its own tr::Scope and ends with Residency::mark_iteration, so from the second pass Flow
// evicts by the recorded order and prefetches the next layers' weights. A std::function callback
// records the device bytes at every event.
//
// Prints the manager's counters per pass (loads, KiB loaded, evictions, prefetch hits and misses,
// peak vs budget). Exits 1 if a call throws, a pass's result differs from the run without the
// manager (bit for bit on the simulated device), the device bytes ever exceed the budget, or a
// handle is left at the end.
//
//   make test-examples-native      (builds and runs it with the C version; their tables agree)
//   build/examples/flow_stack_cpp [simulated|cuda]   (default simulated; on CUDA the results are
//                                                     compared within 1e-4, kernels differ from CPU)
#include "tensorref.hpp"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kLayers = 8;
constexpr int64_t kWidth = 256;
constexpr int64_t kBatch = 64;
constexpr int kPasses = 5;

// One forward pass inside its own scope: the output's floats.
std::vector<float> forward(const std::vector<tr::Tensor>& weights, const tr::Tensor& x) {
    tr::Scope scope;
    tr::Tensor h = x.matmul(weights[0]);
    for (size_t i = 1; i < weights.size(); i++) {
        tr::Tensor a = h.relu();
        h.dispose();  // dead before the next op, so Flow never writes it back
        h = a.matmul(weights[i]);
    }
    return h.to_vector<float>();
}

// Whether `got` equals `expected`: bit for bit, or within `tolerance` (relative) if it is > 0.
bool same(const std::vector<float>& got, const std::vector<float>& expected, double tolerance) {
    if (tolerance <= 0 || got.size() != expected.size()) return got == expected;
    for (size_t i = 0; i < got.size(); i++) {
        if (std::fabs(double(got[i]) - expected[i]) > tolerance * (1 + std::fabs(double(expected[i])))) return false;
    }
    return true;
}

unsigned long long kib(uint64_t bytes) { return static_cast<unsigned long long>(bytes >> 10); }
unsigned long long ull(uint64_t n) { return static_cast<unsigned long long>(n); }

int run(const std::string& device_name) {
    const uint64_t weight_bytes = uint64_t(kLayers) * kWidth * kWidth * sizeof(float);
    tr::ResidencyConfig config(tr::Policy::Flow, weight_bytes / 4);
    double tolerance = 0;
    if (device_name == "cuda") {
        if (tr::version().find("available: yes") == std::string::npos) {
            std::fprintf(stderr, "CUDA is not available: %s\n", tr::version().c_str());
            return 2;
        }
        config.device = tr::Device::Cuda;
        tolerance = 1e-4;
    } else {
        config.device = tr::Device::Simulated;
    }

    size_t live_at_start = tr::live_handles();
    bool equal = true;
    tr::ResidencyStats last;
    std::atomic<uint64_t> max_event_bytes{0};  // written by the callback, on the op's thread
    {
        tr::NoGradGuard inference;  // no autograd graph to record
        tr::manual_seed(0);
        std::vector<tr::Tensor> weights;
        for (int i = 0; i < kLayers; i++) weights.push_back(tr::randn({kWidth, kWidth}) * (1.0 / 16));  // 1/sqrt(256)
        tr::Tensor x = tr::randn({kBatch, kWidth});
        std::vector<float> expected = forward(weights, x);  // without a manager

        tr::Residency residency(config, [&](const tr::Event& e) {
            // Runs while the manager is locked: no library calls here.
            uint64_t seen = max_event_bytes.load(std::memory_order_relaxed);
            while (e.device_bytes > seen && !max_event_bytes.compare_exchange_weak(seen, e.device_bytes)) {
            }
        });
        std::printf("C++: %d layers %lldx%lld f32, %llu KiB of weights, budget %llu KiB, Flow on the %s device\n",
                    kLayers, static_cast<long long>(kWidth), static_cast<long long>(kWidth), kib(weight_bytes),
                    kib(config.budget_bytes), device_name.c_str());
        std::printf("%4s %6s %11s %10s %14s %16s %9s %11s\n", "pass", "loads", "loaded KiB", "evictions",
                    "prefetch hits", "prefetch misses", "peak KiB", "budget KiB");
        last = tr::Residency::stats();
        for (int pass = 1; pass <= kPasses; pass++) {
            std::vector<float> got = forward(weights, x);
            tr::Residency::mark_iteration();
            tr::ResidencyStats now = tr::Residency::stats();
            tr::ResidencyStats d = now.since(last);
            std::printf("%4d %6llu %11llu %10llu %14llu %16llu %9llu %11llu\n", pass, ull(d.loads), kib(d.load_bytes),
                        ull(d.evictions), ull(d.prefetch_hits), ull(d.prefetch_misses), kib(now.peak_device_bytes),
                        kib(now.budget));
            if (!same(got, expected, tolerance)) {
                std::fprintf(stderr, "pass %d: the result differs from the run without the manager\n", pass);
                equal = false;
            }
            last = now;
        }
        residency.disable();  // throws if the manager cannot write back (the destructor would not)
        residency.rethrow_callback_error();
    }  // the tensors are released here

    bool within = last.peak_device_bytes <= config.budget_bytes && max_event_bytes.load() <= config.budget_bytes;
    std::printf("peak %llu bytes, max at any event %llu bytes, budget %llu bytes: %s\n", ull(last.peak_device_bytes),
                ull(max_event_bytes.load()), ull(config.budget_bytes),
                within ? "within the budget" : "OVER THE BUDGET");
    std::printf("results: %s the run without the manager in all %d passes\n", equal ? "equal to" : "NOT equal to",
                kPasses);
    bool ok = equal && within;
    if (tr::live_handles() != live_at_start) {
        std::fprintf(stderr, "leak: %zu live handles at the end, %zu at the start\n", tr::live_handles(),
                     live_at_start);
        ok = false;
    }
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    std::string device = argc > 1 ? argv[1] : "simulated";
    if (device != "simulated" && device != "cuda") {
        std::fprintf(stderr, "usage: %s [simulated|cuda]\n", argv[0]);
        return 2;
    }
    try {
        return run(device);
    } catch (const tr::Error& e) {
        std::fprintf(stderr, "flow_stack: %s\n", e.what());
        return 1;
    }
}

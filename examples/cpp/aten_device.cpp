// A C++ program that writes its model in ATen, over tensors made through libtensorref, under the
// residency manager: each tr::Tensor handle becomes an at::Tensor of the `tensorref` device
// (tr::to_aten), one storage of the manager's with the handle, and every ATen op on it runs
// under the manager's budget.
//
// The stack of examples/cpp/flow_stack.cpp (8 layers of 256x256 f32 weights, 2 MiB, under a
// 512 KiB budget, Flow on the simulated device, h = relu(h) @ w per layer), written with ATen ops.
// The program never marks an iteration: Flow learns the order from the repeating op sequence.
// Checks, and exits 1 otherwise: every pass's result equals the same ATen code on the CPU bit for
// bit; the manager ran the ops (its op count grew) within the budget; Flow prefetched what the
// passes after the first read; a write through ATen is
// seen through the handle and the other way; the result handed back as a handle
// (tr::from_aten) holds the same values; under autocast on the device (bfloat16) the products
// run in bfloat16, equal to the same casts written out on the CPU; a tensor of another device is
// refused; libtorch's autograd on the device gives the CPU's gradient bit for bit and catches an
// in-place write to a tensor it saved; no handle is left at the end.
//
//   make test-examples-native        (builds and runs it)
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include "tensorref_torch.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int kLayers = 8;
constexpr int64_t kWidth = 256;
constexpr int64_t kBatch = 64;
constexpr int kPasses = 4;

at::Tensor forward(const std::vector<at::Tensor>& weights, const at::Tensor& x) {
    at::Tensor h = at::matmul(x, weights[0]);
    for (size_t i = 1; i < weights.size(); i++) h = at::matmul(at::relu(h), weights[i]);
    return h;
}

// The handle's values as a CPU at::Tensor (read through the library, not ATen).
at::Tensor values_of(const tr::Tensor& t, at::IntArrayRef shape) {
    std::vector<float> v = t.to_vector<float>();
    return at::from_blob(v.data(), shape, at::kFloat).clone();
}

unsigned long long ull(uint64_t n) { return static_cast<unsigned long long>(n); }

// Autocast on the `tensorref` device (PrivateUse1) in `dtype` while in scope.
struct Autocast {
    explicit Autocast(at::ScalarType dtype) {
        at::autocast::set_autocast_dtype(at::kPrivateUse1, dtype);
        at::autocast::set_autocast_enabled(at::kPrivateUse1, true);
    }
    ~Autocast() {
        at::autocast::set_autocast_enabled(at::kPrivateUse1, false);
        at::autocast::clear_cache();
    }
    Autocast(const Autocast&) = delete;
    Autocast& operator=(const Autocast&) = delete;
};

int run() {
    const size_t live_at_start = tr::live_handles();
    const uint64_t weight_bytes = uint64_t(kLayers) * kWidth * kWidth * sizeof(float);
    tr::ResidencyConfig config(tr::Policy::Flow, weight_bytes / 4);
    config.device = tr::Device::Simulated;
    bool ok = true;
    auto check = [&](bool claim, const char* what) {
        std::printf("%-72s %s\n", what, claim ? "yes" : "NO");
        ok = ok && claim;
    };
    {
        tr::NoGradGuard inference;  // libtorch's grad mode, for ATen and the library alike
        tr::manual_seed(0);
        std::vector<tr::Tensor> handles;
        for (int i = 0; i < kLayers; i++) handles.push_back(tr::randn({kWidth, kWidth}) * (1.0 / 16));
        tr::Tensor x_handle = tr::randn({kBatch, kWidth});

        // The same model on the CPU, over the handles' values.
        std::vector<at::Tensor> cpu_weights;
        for (const tr::Tensor& w : handles) cpu_weights.push_back(values_of(w, {kWidth, kWidth}));
        at::Tensor expected = forward(cpu_weights, values_of(x_handle, {kBatch, kWidth}));

        tr::Residency residency(config);
        std::vector<at::Tensor> weights;
        for (const tr::Tensor& w : handles) weights.push_back(tr::to_aten(w));
        at::Tensor x = tr::to_aten(x_handle);
        std::printf("ATen on the tensorref device: %d layers, %llu KiB of weights, budget %llu KiB, Flow\n", kLayers,
                    ull(weight_bytes >> 10), ull(config.budget_bytes >> 10));

        bool equal = true;
        at::Tensor h;
        for (int pass = 1; pass <= kPasses; pass++) {
            h = forward(weights, x);
            equal = equal && at::equal(h.cpu(), expected);
        }
        tr::ResidencyStats s = tr::Residency::stats();
        std::printf("ops %llu, loads %llu, evictions %llu, prefetch hits %llu, peak %llu of %llu bytes\n", ull(s.ops),
                    ull(s.loads), ull(s.evictions), ull(s.prefetch_hits), ull(s.peak_device_bytes), ull(s.budget));
        check(equal, "every pass equals the same ATen code on the CPU, bit for bit");
        check(s.ops >= uint64_t(kPasses) * (2 * kLayers - 1) && s.evictions > 0, "the manager ran the ops and evicted");
        check(s.peak_device_bytes <= config.budget_bytes, "the device bytes stayed within the budget");
        check(s.prefetch_hits > 0, "with no mark, Flow learned the passes' order and prefetched");

        weights[0].mul_(2);  // through ATen, seen through the handle
        check(at::equal(values_of(handles[0], {kWidth, kWidth}), cpu_weights[0] * 2), "a write through ATen is seen through the handle");
        handles[1].mul_scalar_(3.0);  // through the library, seen through ATen
        check(at::equal(weights[1].cpu(), cpu_weights[1] * 3), "a write through the handle is seen through ATen");
        tr::Tensor back = tr::from_aten(h);
        check(at::equal(values_of(back, {kBatch, kWidth}), expected), "the result as a handle holds the same values");
        {
            std::vector<at::Tensor> low;  // the weights as they now are, cast as autocast casts them
            for (const at::Tensor& w : weights) low.push_back(w.cpu().to(at::kBFloat16));
            const at::Tensor want = forward(low, x.cpu().to(at::kBFloat16));
            Autocast mixed(at::kBFloat16);
            const at::Tensor got = forward(weights, x);
            check(got.scalar_type() == at::kBFloat16 && at::equal(got.cpu(), want),
                  "under autocast the products run in bfloat16, as written out on the CPU");
        }
        bool refused = false;
        try {
            (void)tr::from_aten(at::ones({2}));
        } catch (const tr::Error& e) {
            refused = e.status() == TR_ERR_INVALID_ARG;
        }
        check(refused, "a CPU at::Tensor is refused as a handle of the device (TR_ERR_INVALID_ARG)");
        residency.disable();
    }
    {  // libtorch's autograd on the device: what it saves for backward, the manager holds
        tr::manual_seed(1);
        tr::Tensor w_handle = tr::randn({kWidth, kWidth}) * (1.0 / 16);
        tr::Tensor x_handle = tr::randn({kBatch, kWidth});
        at::Tensor w_cpu = values_of(w_handle, {kWidth, kWidth}).requires_grad_();
        at::relu(values_of(x_handle, {kBatch, kWidth}).matmul(w_cpu)).square().sum().backward();

        tr::Residency residency(config);
        at::Tensor w = tr::to_aten(w_handle).detach().requires_grad_();
        at::relu(tr::to_aten(x_handle).matmul(w)).square().sum().backward();
        check(at::equal(w.grad().cpu(), w_cpu.grad()), "a gradient through ATen on the device equals the CPU's, bit for bit");
        at::Tensor y = w.sigmoid();  // sigmoid saves its result
        y.mul_(2);
        bool caught = false;
        try {
            y.sum().backward();
        } catch (const std::exception& e) {
            caught = std::string(e.what()).find("modified by an inplace operation") != std::string::npos;
        }
        check(caught, "an in-place write to a tensor autograd saved is caught at backward");
        residency.disable();
    }
    check(tr::live_handles() == live_at_start, "no handle is left");
    return ok ? 0 : 1;
}

}  // namespace

int main() {
    try {
        return run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

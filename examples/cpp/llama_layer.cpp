// A Llama decoder layer through the C++ binding, the same as examples/python/llama_layer.py:
// RMSNorm, rotary position embeddings, grouped-query attention through
// scaled_dot_product_attention, a SwiGLU MLP and the two residual additions, written with the
// library's ops (most generated from libtorch's schema), under Flow on the simulated device with
// a budget that holds the largest projection and its activations but not the layer's weights.
//
// Reads the weights, the input `x` and transformers' output `expected` from a safetensors file
// the Python version writes (`--fixture`), and exits 1 unless the output is within 1e-5 of
// transformers' LlamaDecoderLayer and the device bytes stayed within the budget.
//
//   make test-examples-native        (writes the file and runs this and the C version)
//   build/examples/llama_layer_cpp build/examples/llama_layer.safetensors
#include "tensorref.hpp"

#include <cmath>
#include <cstdio>
#include <string>

namespace {

// The layer's shape, as examples/python/llama_layer.py configures it.
constexpr int64_t kHidden = 64, kInter = 172, kHeads = 4, kKvHeads = 2, kHeadDim = kHidden / kHeads;
constexpr int64_t kBatch = 2, kSeq = 8;
constexpr double kEps = 1e-6, kTheta = 10000.0;

// The last dimension's halves swapped, the second negated: [-x2, x1].
tr::Tensor rotate_half(const tr::Tensor& x) {
    constexpr int64_t half = kHeadDim / 2;
    return tr::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

tr::Tensor layer(const tr::Tensor& x, const tr::Weights& w) {
    // cos and sin of the rotary angles, [seq, head_dim], as LlamaRotaryEmbedding makes them.
    tr::Tensor inv_freq = 1.0 / tr::arange(0, kHeadDim, 2, tr::DType::F32).div_scalar(double(kHeadDim)).rpow_scalar(kTheta);
    tr::Tensor angles = tr::arange(0, kSeq, 1, tr::DType::F32).outer(inv_freq);
    tr::Tensor emb = tr::cat({angles, angles}, -1);
    tr::Tensor cos = emb.cos(), sin = emb.sin();

    auto project = [&](const tr::Tensor& n, const char* name, int64_t heads) {
        return tr::linear(n, w.at(name), std::nullopt).reshape({kBatch, kSeq, heads, kHeadDim}).transpose(1, 2);
    };
    auto rope = [&](const tr::Tensor& q) { return q * cos + rotate_half(q) * sin; };

    tr::Tensor n = x.rms_norm({kHidden}, w.at("input_layernorm.weight"), kEps);
    tr::Tensor q = rope(project(n, "self_attn.q_proj.weight", kHeads));
    tr::Tensor k = rope(project(n, "self_attn.k_proj.weight", kKvHeads));
    tr::Tensor v = project(n, "self_attn.v_proj.weight", kKvHeads);
    tr::Tensor attn = q.scaled_dot_product_attention(k, v, std::nullopt, 0.0, true, std::nullopt, true);
    tr::Tensor h = x + tr::linear(attn.transpose(1, 2).reshape({kBatch, kSeq, kHidden}), w.at("self_attn.o_proj.weight"),
                                  std::nullopt);
    n = h.rms_norm({kHidden}, w.at("post_attention_layernorm.weight"), kEps);
    tr::Tensor gate = tr::linear(n, w.at("mlp.gate_proj.weight"), std::nullopt).silu();
    tr::Tensor up = tr::linear(n, w.at("mlp.up_proj.weight"), std::nullopt);
    return h + tr::linear(gate * up, w.at("mlp.down_proj.weight"), std::nullopt);
}

}  // namespace

int main(int argc, char** argv) {
    const std::string path = argc > 1 ? argv[1] : "build/examples/llama_layer.safetensors";
    // The largest projection (hidden x intermediate) and its input and output activations, and
    // a quarter more; the layer's weights are about 2.5 times that.
    const uint64_t largest = (kHidden * kInter + kBatch * kSeq * (kHidden + kInter)) * 4;
    const uint64_t budget = largest * 5 / 4;
    try {
        tr::NoGradGuard no_grad;
        double diff = 0;
        uint64_t peak = 0;
        {
            tr::Residency residency(tr::ResidencyConfig(tr::Policy::Flow, budget));
            tr::Weights w = tr::Weights::load(path);
            tr::Tensor got = layer(w.at("x"), w);
            peak = tr::Residency::stats().peak_device_bytes;
            std::vector<float> a = got.to_vector<float>(), b = w.at("expected").to_vector<float>();
            if (a.size() != b.size()) throw tr::Error(TR_ERR_SHAPE, "the output's size differs from transformers'");
            for (size_t i = 0; i < a.size(); i++) diff = std::fmax(diff, std::fabs(double(a[i]) - b[i]));
        }
        std::printf("budget %llu B, peak %llu B; largest difference from transformers: %.2e\n",
                    static_cast<unsigned long long>(budget), static_cast<unsigned long long>(peak), diff);
        if (peak > budget || !(diff <= 1e-5)) {
            std::printf("FAILED: %s\n", peak > budget ? "over the budget" : "differs from transformers");
            return 1;
        }
        return 0;
    } catch (const std::exception& e) {
        std::printf("FAILED: %s\n", e.what());
        return 1;
    }
}

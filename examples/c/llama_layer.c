/* A Llama decoder layer through the C ABI, the same as examples/python/llama_layer.py and
 * examples/cpp/llama_layer.cpp: RMSNorm, rotary position embeddings, grouped-query attention
 * through scaled_dot_product_attention, a SwiGLU MLP and the two residual additions, written with
 * the library's ops (most generated from libtorch's schema), under Flow on the simulated device
 * with a budget that holds the largest projection and its activations but not the layer's
 * weights. Every handle the layer makes is owned by one dispose scope, disposed at the end.
 *
 * Reads the weights, the input `x` and transformers' output `expected` from a safetensors file
 * the Python version writes (`--fixture`), and exits 1 unless the output is within 1e-5 of
 * transformers' LlamaDecoderLayer and the device bytes stayed within the budget.
 *
 *   make test-examples-native        (writes the file and runs this and the C++ version)
 *   build/examples/llama_layer_c build/examples/llama_layer.safetensors
 */
#include "tensorref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The layer's shape, as examples/python/llama_layer.py configures it. */
#define HIDDEN 64
#define INTER 172
#define HEADS 4
#define KV_HEADS 2
#define HEAD_DIM (HIDDEN / HEADS)
#define BATCH 2
#define SEQ 8
#define EPS 1e-6
#define THETA 10000.0
#define MAX_WEIGHTS 16
#define NAMES_LEN 1024

#define TRY(call) check((call), #call, __LINE__)

static void check(tr_status status, const char *what, int line) {
    char message[1024];
    size_t len = 0;
    if (status == TR_OK) return;
    if (tr_last_error(message, sizeof message, &len) != TR_OK) message[0] = '\0';
    fprintf(stderr, "llama_layer.c:%d: %s failed: %s (%d): %s\n", line, what, tr_status_str(status), (int)status,
            message);
    exit(1);
}

/* The weights file: its tensors and their names. */
static tr_tensor tensors[MAX_WEIGHTS];
static char names[NAMES_LEN];
static size_t count;

static tr_tensor weight(const char *name) {
    const char *at = names;
    size_t i;
    for (i = 0; i < count; i++, at += strlen(at) + 1) {
        if (strcmp(at, name) == 0) return tensors[i];
    }
    fprintf(stderr, "llama_layer.c: no tensor %s in the weights file\n", name);
    exit(1);
}

/* x @ weight^T, without bias. */
static tr_tensor linear(tr_tensor x, const char *name) {
    tr_tensor out, none = {0};
    TRY(tr_tensor_linear(x, weight(name), none, &out));
    return out;
}

/* A projection's result as [batch, heads, seq, head_dim]. */
static tr_tensor heads_of(tr_tensor t, int64_t heads) {
    const int64_t shape[4] = {BATCH, SEQ, heads, HEAD_DIM};
    tr_tensor r, out;
    TRY(tr_tensor_reshape(t, shape, 4, &r));
    TRY(tr_tensor_transpose(r, 1, 2, &out));
    return out;
}

static tr_tensor mul(tr_tensor a, tr_tensor b) {
    tr_tensor out;
    TRY(tr_tensor_mul(a, b, &out));
    return out;
}

static tr_tensor add(tr_tensor a, tr_tensor b) {
    tr_tensor out;
    TRY(tr_tensor_add(a, b, &out));
    return out;
}

/* q * cos + rotate_half(q) * sin, where rotate_half(q) = [-q2, q1] (q's last dimension's halves). */
static tr_tensor rope(tr_tensor q, tr_tensor cos, tr_tensor sin) {
    tr_tensor q1, q2, neg, halves[2], rotated;
    TRY(tr_tensor_narrow(q, -1, 0, HEAD_DIM / 2, &q1));
    TRY(tr_tensor_narrow(q, -1, HEAD_DIM / 2, HEAD_DIM / 2, &q2));
    TRY(tr_tensor_neg(q2, &neg));
    halves[0] = neg;
    halves[1] = q1;
    TRY(tr_tensor_cat(halves, 2, -1, &rotated));
    return add(mul(q, cos), mul(rotated, sin));
}

static tr_tensor rms_norm(tr_tensor x, const char *name) {
    const int64_t shape[1] = {HIDDEN};
    const double eps = EPS;
    tr_tensor out;
    TRY(tr_tensor_rms_norm(x, shape, 1, weight(name), &eps, &out));
    return out;
}

static tr_tensor layer(tr_tensor x) {
    const int64_t flat[3] = {BATCH, SEQ, HIDDEN};
    tr_tensor steps, scaled, powers, inv_freq, positions, angles, both[2], emb, cos, sin;
    tr_tensor n, q, k, v, attn, t, merged, h, gate, up, out, none = {0};
    /* cos and sin of the rotary angles, [seq, head_dim], as LlamaRotaryEmbedding makes them. */
    TRY(tr_tensor_arange(0, HEAD_DIM, 2, TR_DTYPE_F32, &steps));
    TRY(tr_tensor_div_scalar(steps, tr_scalar_float(HEAD_DIM), &scaled));
    TRY(tr_tensor_rpow_scalar(scaled, tr_scalar_float(THETA), &powers));
    TRY(tr_tensor_rdiv_scalar(powers, tr_scalar_float(1.0), &inv_freq));
    TRY(tr_tensor_arange(0, SEQ, 1, TR_DTYPE_F32, &positions));
    TRY(tr_tensor_outer(positions, inv_freq, &angles));
    both[0] = angles;
    both[1] = angles;
    TRY(tr_tensor_cat(both, 2, -1, &emb));
    TRY(tr_tensor_cos(emb, &cos));
    TRY(tr_tensor_sin(emb, &sin));

    n = rms_norm(x, "input_layernorm.weight");
    q = rope(heads_of(linear(n, "self_attn.q_proj.weight"), HEADS), cos, sin);
    k = rope(heads_of(linear(n, "self_attn.k_proj.weight"), KV_HEADS), cos, sin);
    v = heads_of(linear(n, "self_attn.v_proj.weight"), KV_HEADS);
    /* causal, grouped-query; no mask, no dropout, the default scale */
    TRY(tr_tensor_scaled_dot_product_attention(q, k, v, none, 0.0, true, NULL, true, &attn));
    TRY(tr_tensor_transpose(attn, 1, 2, &t));
    TRY(tr_tensor_reshape(t, flat, 3, &merged));
    h = add(x, linear(merged, "self_attn.o_proj.weight"));
    n = rms_norm(h, "post_attention_layernorm.weight");
    TRY(tr_tensor_silu(linear(n, "mlp.gate_proj.weight"), &gate));
    up = linear(n, "mlp.up_proj.weight");
    out = add(h, linear(mul(gate, up), "mlp.down_proj.weight"));
    return out;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "build/examples/llama_layer.safetensors";
    /* The largest projection (hidden x intermediate) and its input and output activations, and a
     * quarter more; the layer's weights are about 2.5 times that. */
    const uint64_t largest = (uint64_t)(HIDDEN * INTER + BATCH * SEQ * (HIDDEN + INTER)) * 4;
    const uint64_t budget = largest * 5 / 4;
    static float got[BATCH * SEQ * HIDDEN], expected[BATCH * SEQ * HIDDEN];
    tr_residency_config config;
    tr_residency_stats stats;
    tr_scope scope = {0};
    size_t names_len = 0, written = 0, i, live = tr_live_handles();
    double diff = 0;

    TRY(tr_grad_set_enabled(false, NULL));
    TRY(tr_residency_config_default(&config));
    config.policy = TR_POLICY_FLOW;
    config.budget_bytes = budget;
    TRY(tr_residency_configure(&config));
    TRY(tr_scope_new(&scope));
    TRY(tr_weights_load(path, tensors, MAX_WEIGHTS, names, NAMES_LEN, &count, &names_len));
    TRY(tr_tensor_copy_to(layer(weight("x")), (uint8_t *)got, sizeof got, &written));
    TRY(tr_tensor_copy_to(weight("expected"), (uint8_t *)expected, sizeof expected, &written));
    TRY(tr_residency_stats_get(&stats));
    TRY(tr_scope_dispose(scope)); /* every handle above, the weights too */
    TRY(tr_residency_disable());
    for (i = 0; i < BATCH * SEQ * HIDDEN; i++) diff = fmax(diff, fabs((double)got[i] - expected[i]));
    printf("budget %llu B, peak %llu B; largest difference from transformers: %.2e\n", (unsigned long long)budget,
           (unsigned long long)stats.peak_device_bytes, diff);
    if (stats.peak_device_bytes > budget || !(diff <= 1e-5) || tr_live_handles() != live) {
        printf("FAILED: %s\n", stats.peak_device_bytes > budget ? "over the budget"
                               : tr_live_handles() != live     ? "handles left"
                                                                : "differs from transformers");
        return 1;
    }
    return 0;
}

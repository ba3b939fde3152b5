/*
 * Scenario (b) through the C ABI: a stack of linear layers whose weights are 4x the device
 * budget runs under the Flow policy.
 *
 * The same scenario as examples/flow_stack.rs and examples/cpp/flow_stack.cpp: 8 layers of
 * 256x256 f32 weights (2 MiB) under a 512 KiB budget, a 64x256 input, h = relu(h) @ w per layer,
 * seed 0, inference (grad mode off). Each forward pass runs in its own dispose scope and ends with
 * tr_residency_mark_iteration, so from the second pass Flow evicts by the recorded order and
 * prefetches the next layers' weights. An event callback records the device bytes at every event.
 *
 * Prints the manager's counters per pass (loads, KiB loaded, evictions, prefetch hits and misses,
 * peak vs budget). Exits 1 if a call fails, a pass's result differs from the run without the
 * manager (bit for bit on the simulated device), the device bytes ever exceed the budget, or a
 * handle is left at the end.
 *
 *   make test-examples-native      (builds and runs it with the C++ version; their tables agree)
 *   build/examples/flow_stack_c [simulated|cuda]   (default simulated; on CUDA the results are
 *                                                   compared within 1e-4, kernels differ from CPU)
 */
#include "tensorref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYERS 8
#define WIDTH 256
#define BATCH 64
#define PASSES 5
#define OUT_LEN (BATCH * WIDTH)

/* Exits with the library's message when a call fails. */
#define TRY(call) check((call), #call, __LINE__)

static void check(tr_status status, const char *what, int line) {
    char message[1024];
    size_t len = 0;
    if (status == TR_OK) return;
    if (tr_last_error(message, sizeof message, &len) != TR_OK) message[0] = '\0';
    fprintf(stderr, "flow_stack.c:%d: %s failed: %s (%d): %s\n", line, what, tr_status_str(status),
            (int)status, message);
    exit(1);
}

/* The highest device byte count at any event. The callback runs while the manager is locked: it
 * only writes this variable and never calls the library. */
static uint64_t max_event_bytes = 0;

static void on_event(const tr_event *event, void *user) {
    (void)user;
    if (event->device_bytes > max_event_bytes) max_event_bytes = event->device_bytes;
}

/* One forward pass inside its own scope; writes the output's floats to `out`. */
static void forward(const tr_tensor weights[LAYERS], tr_tensor x, float *out) {
    tr_scope scope = {0};
    tr_tensor h, a;
    size_t written = 0;
    int i;

    TRY(tr_scope_new(&scope));
    TRY(tr_tensor_matmul(x, weights[0], &h));
    for (i = 1; i < LAYERS; i++) {
        TRY(tr_tensor_relu(h, &a));
        TRY(tr_tensor_release(h)); /* dead before the next op, so Flow never writes it back */
        TRY(tr_tensor_matmul(a, weights[i], &h));
        TRY(tr_tensor_release(a));
    }
    TRY(tr_tensor_copy_to(h, (uint8_t *)out, OUT_LEN * sizeof(float), &written));
    TRY(tr_scope_dispose(scope)); /* releases h */
}

static double magnitude(double v) { return v < 0 ? -v : v; }

/* Whether `got` equals `expected`: bit for bit, or within `tolerance` (relative) if it is > 0. */
static int same(const float *got, const float *expected, double tolerance) {
    size_t i;
    if (tolerance <= 0) return memcmp(got, expected, OUT_LEN * sizeof(float)) == 0;
    for (i = 0; i < OUT_LEN; i++) {
        if (magnitude((double)got[i] - expected[i]) > tolerance * (1 + magnitude(expected[i]))) return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    const int64_t w_shape[2] = {WIDTH, WIDTH}, x_shape[2] = {BATCH, WIDTH};
    const uint64_t weight_bytes = (uint64_t)LAYERS * WIDTH * WIDTH * sizeof(float);
    const char *device_name = argc > 1 ? argv[1] : "simulated";
    size_t live_at_start = tr_live_handles();
    tr_residency_config config;
    tr_residency_stats last, now;
    tr_tensor weights[LAYERS], raw, x;
    float *expected = NULL, *got = NULL;
    double tolerance = 0;
    int i, pass, equal = 1, within = 1, ok;

    if (tr_abi_version() != TR_ABI_VERSION) {
        fprintf(stderr, "ABI mismatch: header %d, library %u\n", TR_ABI_VERSION, tr_abi_version());
        return 1;
    }
    TRY(tr_residency_config_default(&config));
    config.policy = TR_POLICY_FLOW;
    config.budget_bytes = weight_bytes / 4;
    if (strcmp(device_name, "cuda") == 0) {
        if (!strstr(tr_version(), "available: yes")) {
            fprintf(stderr, "CUDA is not available: %s\n", tr_version());
            return 2;
        }
        config.device = TR_DEVICE_CUDA;
        tolerance = 1e-4;
    } else if (strcmp(device_name, "simulated") == 0) {
        config.device = TR_DEVICE_SIMULATED;
    } else {
        fprintf(stderr, "usage: %s [simulated|cuda]\n", argv[0]);
        return 2;
    }
    expected = malloc(OUT_LEN * sizeof(float));
    got = malloc(OUT_LEN * sizeof(float));
    if (!expected || !got) return 1;

    /* Inference: no autograd graph to record. */
    TRY(tr_grad_set_enabled(false, NULL));
    TRY(tr_manual_seed(0));
    for (i = 0; i < LAYERS; i++) {
        TRY(tr_tensor_randn(w_shape, 2, TR_DTYPE_F32, &raw));
        TRY(tr_tensor_mul_scalar(raw, tr_scalar_float(1.0 / 16), &weights[i])); /* 1/sqrt(WIDTH) */
        TRY(tr_tensor_release(raw));
    }
    TRY(tr_tensor_randn(x_shape, 2, TR_DTYPE_F32, &x));
    forward(weights, x, expected); /* without a manager */

    TRY(tr_residency_configure(&config));
    TRY(tr_residency_set_callback(on_event, NULL));
    printf("C: %d layers %dx%d f32, %llu KiB of weights, budget %llu KiB, Flow on the %s device\n",
           LAYERS, WIDTH, WIDTH, (unsigned long long)(weight_bytes >> 10),
           (unsigned long long)(config.budget_bytes >> 10), device_name);
    printf("%4s %6s %11s %10s %14s %16s %9s %11s\n", "pass", "loads", "loaded KiB", "evictions",
           "prefetch hits", "prefetch misses", "peak KiB", "budget KiB");
    TRY(tr_residency_stats_get(&last));
    for (pass = 1; pass <= PASSES; pass++) {
        forward(weights, x, got);
        TRY(tr_residency_mark_iteration());
        TRY(tr_residency_stats_get(&now));
        printf("%4d %6llu %11llu %10llu %14llu %16llu %9llu %11llu\n", pass,
               (unsigned long long)(now.loads - last.loads),
               (unsigned long long)((now.load_bytes - last.load_bytes) >> 10),
               (unsigned long long)(now.evictions - last.evictions),
               (unsigned long long)(now.prefetch_hits - last.prefetch_hits),
               (unsigned long long)(now.prefetch_misses - last.prefetch_misses),
               (unsigned long long)(now.peak_device_bytes >> 10), (unsigned long long)(now.budget >> 10));
        if (!same(got, expected, tolerance)) {
            fprintf(stderr, "pass %d: the result differs from the run without the manager\n", pass);
            equal = 0;
        }
        last = now;
    }
    TRY(tr_residency_disable()); /* also removes the callback */

    within = last.peak_device_bytes <= config.budget_bytes && max_event_bytes <= config.budget_bytes;
    printf("peak %llu bytes, max at any event %llu bytes, budget %llu bytes: %s\n",
           (unsigned long long)last.peak_device_bytes, (unsigned long long)max_event_bytes,
           (unsigned long long)config.budget_bytes, within ? "within the budget" : "OVER THE BUDGET");
    printf("results: %s the run without the manager in all %d passes\n",
           equal ? "equal to" : "NOT equal to", PASSES);
    ok = equal && within;

    for (i = 0; i < LAYERS; i++) TRY(tr_tensor_release(weights[i]));
    TRY(tr_tensor_release(x));
    free(expected);
    free(got);
    if (tr_live_handles() != live_at_start) {
        fprintf(stderr, "leak: %zu live handles at the end, %zu at the start\n", tr_live_handles(),
                live_at_start);
        ok = 0;
    }
    return ok ? 0 : 1;
}

/*
 * Trains a small MLP through the C ABI with one dispose scope per step.
 *
 * The scenario of `make demo` (examples/train_mlp.rs): a 16-64-1 ReLU network learns
 * y = tanh(2 x0 x1) from 256 random samples, MSE loss, plain SGD (tr_optim_sgd_step, lr 0.05),
 * 300 steps, seed 0. In C nothing releases a temporary unless the code does, so each step runs
 * inside its own scope: the forward pass, the loss and whatever else the step creates belong to
 * it, and tr_scope_dispose releases them all at once. The data and the parameters are created
 * before any scope is open, so they belong to the program, which releases them at the end.
 *
 * Prints the loss every 50 steps, then the live handle count after every step (run-length
 * encoded: "6 x 300" means 6 after each of the 300 steps) and the final loss. Exits 1 if a call
 * fails, the live count ever moves, the loss does not fall, or a handle is left at the end.
 *
 *   make test-examples-native      (builds and runs it with the C++ version)
 *   build/examples/train_mlp_c [steps]
 */
#include "tensorref.h"

#include <stdio.h>
#include <stdlib.h>

#define N_PARAMS 4

/* Exits with the library's message when a call fails. */
#define TRY(call) check((call), #call, __LINE__)

static void check(tr_status status, const char *what, int line) {
    char message[1024];
    size_t len = 0;
    if (status == TR_OK) return;
    if (tr_last_error(message, sizeof message, &len) != TR_OK) message[0] = '\0';
    fprintf(stderr, "train_mlp.c:%d: %s failed: %s (%d): %s\n", line, what, tr_status_str(status),
            (int)status, message);
    exit(1);
}

/* One SGD step inside its own scope; returns the loss before the update. */
static double train_step(tr_tensor x, tr_tensor y, const tr_tensor params[N_PARAMS], size_t *live_during) {
    tr_scope scope = {0};
    tr_tensor hidden, act, pred, loss;
    double value = 0;
    int i;

    TRY(tr_scope_new(&scope));
    TRY(tr_tensor_linear(x, params[0], params[1], &hidden));
    TRY(tr_tensor_relu(hidden, &act));
    TRY(tr_tensor_linear(act, params[2], params[3], &pred));
    TRY(tr_tensor_mse_loss(pred, y, &loss));
    TRY(tr_tensor_backward(loss));
    TRY(tr_optim_sgd_step(params, N_PARAMS, 0.05));
    for (i = 0; i < N_PARAMS; i++) TRY(tr_tensor_zero_grad(params[i]));
    TRY(tr_tensor_item(loss, &value));
    *live_during = tr_live_handles();
    /* No release calls above: the scope owns hidden, act, pred and loss. */
    TRY(tr_scope_dispose(scope));
    return value;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 300;
    const int64_t x_shape[2] = {256, 16};
    const int64_t w1_shape[2] = {64, 16}, b1_shape[1] = {64};
    const int64_t w2_shape[2] = {1, 64}, b2_shape[1] = {1};
    size_t live_at_start = tr_live_handles();
    size_t *live = NULL;
    tr_tensor x, x0, x1, prod, prod2, y, w1_init, w2_init, params[N_PARAMS];
    double first_loss = 0, loss = 0;
    size_t during = 0;
    int step, i, ok = 1;

    if (steps < 1) {
        fprintf(stderr, "usage: %s [steps >= 1]\n", argv[0]);
        return 2;
    }
    if (tr_abi_version() != TR_ABI_VERSION) {
        fprintf(stderr, "ABI mismatch: header %d, library %u\n", TR_ABI_VERSION, tr_abi_version());
        return 1;
    }
    live = calloc((size_t)steps, sizeof *live);
    if (!live) return 1;

    /* Data and parameters, owned by this program (no scope is open). */
    TRY(tr_manual_seed(0));
    TRY(tr_tensor_randn(x_shape, 2, TR_DTYPE_F32, &x));
    TRY(tr_tensor_narrow(x, 1, 0, 1, &x0));
    TRY(tr_tensor_narrow(x, 1, 1, 1, &x1));
    TRY(tr_tensor_mul(x0, x1, &prod));
    TRY(tr_tensor_mul_scalar(prod, tr_scalar_float(2.0), &prod2));
    TRY(tr_tensor_tanh(prod2, &y));
    TRY(tr_tensor_randn(w1_shape, 2, TR_DTYPE_F32, &w1_init));
    TRY(tr_tensor_mul_scalar(w1_init, tr_scalar_float(0.25), &params[0]));
    TRY(tr_tensor_zeros(b1_shape, 1, TR_DTYPE_F32, &params[1]));
    TRY(tr_tensor_randn(w2_shape, 2, TR_DTYPE_F32, &w2_init));
    TRY(tr_tensor_mul_scalar(w2_init, tr_scalar_float(0.125), &params[2]));
    TRY(tr_tensor_zeros(b2_shape, 1, TR_DTYPE_F32, &params[3]));
    /* The intermediates of the setup are released by hand: no scope would do it. */
    TRY(tr_tensor_release(x0));
    TRY(tr_tensor_release(x1));
    TRY(tr_tensor_release(prod));
    TRY(tr_tensor_release(prod2));
    TRY(tr_tensor_release(w1_init));
    TRY(tr_tensor_release(w2_init));
    for (i = 0; i < N_PARAMS; i++) TRY(tr_tensor_requires_grad_(params[i], true));

    printf("C: training a 16-64-1 MLP for %d steps, one dispose scope per step\n", steps);
    for (step = 0; step < steps; step++) {
        loss = train_step(x, y, params, &during);
        live[step] = tr_live_handles();
        if (step == 0) first_loss = loss;
        if (step == 0 || (step + 1) % 50 == 0 || step == steps - 1) {
            printf("step %4d  loss %.6f  live during the step %zu  live after %zu\n", step + 1, loss,
                   during, live[step]);
        }
    }

    printf("live handles after each step:");
    for (step = 0; step < steps;) {
        int run = 1;
        while (step + run < steps && live[step + run] == live[step]) run++;
        printf(" %zu x %d", live[step], run);
        if (run != steps) ok = 0;
        step += run;
    }
    printf(" (%s)\n", ok ? "flat" : "NOT flat");
    printf("final loss: %.6f (first %.6f)\n", loss, first_loss);

    TRY(tr_tensor_release(x));
    TRY(tr_tensor_release(y));
    for (i = 0; i < N_PARAMS; i++) TRY(tr_tensor_release(params[i]));
    free(live);
    if (tr_live_handles() != live_at_start) {
        fprintf(stderr, "leak: %zu live handles at the end, %zu at the start\n", tr_live_handles(),
                live_at_start);
        ok = 0;
    }
    if (!(loss < first_loss * 0.5)) {
        fprintf(stderr, "the loss did not fall by half: %.6f -> %.6f\n", first_loss, loss);
        ok = 0;
    }
    return ok ? 0 : 1;
}

/*
 * Bad input through the C ABI: every call here is wrong on purpose. Each check asserts the
 * status AND that tr_last_error says what was wrong, that outputs are left alone on failure
 * (except the needed size of TR_ERR_BUFFER_TOO_SMALL), and that nothing leaked: tr_live_handles()
 * is back where it was (RUN checks it after every test; some tests check it after each call).
 */
#include "test_util.h"

#include <limits.h>

/* A 2x3 f32 tensor of zeros. */
static tr_status new23(tr_tensor *out) {
    const int64_t shape[2] = {2, 3};
    return tr_tensor_zeros(shape, 2, TR_DTYPE_F32, out);
}

/* ------------------------------------------------------------------ NULL pointers */

static void null_out_params(void) {
    const int64_t shape[2] = {2, 3};
    tr_tensor t = {0};
    size_t live;
    REQUIRE_OK(new23(&t));
    live = tr_live_handles();
    CHECK_ERR(tr_tensor_zeros(shape, 2, TR_DTYPE_F32, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_randn(shape, 2, TR_DTYPE_F32, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_arange(0, 3, 1, TR_DTYPE_F32, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_add(t, t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_relu(t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_alias(t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_is_valid(t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_dtype(t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_numel(t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_item(t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_scope(t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_grad(t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_requires_grad(t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_tensor_shape(t, NULL, 0, NULL), TR_ERR_NULL_ARG, "out_ndim");
    CHECK_ERR(tr_tensor_copy_to(t, NULL, 0, NULL), TR_ERR_NULL_ARG, "out_written");
    CHECK_ERR(tr_tensor_from_data(NULL, 0, shape, 0, TR_DTYPE_F32, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_scope_new(NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_scope_current(NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_scope_stats_get(NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_EQ_U(tr_live_handles(), live);
    CHECK_OK(tr_tensor_release(t));
}

static void null_scope_out_params(void) {
    tr_scope s = {0};
    tr_tensor t = {0};
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(new23(&t));
    CHECK_ERR(tr_scope_len(s, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_ERR(tr_scope_contains(s, t, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_OK(tr_scope_dispose(s));
}

static void null_data_and_shape(void) {
    const int64_t shape[2] = {2, 3};
    const int64_t empty_shape[1] = {0};
    float data[6] = {0};
    tr_tensor t = {0}, list[2] = {{0}, {0}}, out = {42};
    size_t live = tr_live_handles(), n = 9;
    CHECK_ERR(tr_tensor_from_data(NULL, sizeof data, shape, 2, TR_DTYPE_F32, &out), TR_ERR_NULL_ARG,
              "`data`");
    CHECK_ERR(tr_tensor_from_data((const uint8_t *)data, sizeof data, NULL, 2, TR_DTYPE_F32, &out),
              TR_ERR_NULL_ARG, "`shape`");
    CHECK_ERR(tr_tensor_zeros(NULL, 2, TR_DTYPE_F32, &out), TR_ERR_NULL_ARG, "`shape`");
    CHECK_ERR(tr_tensor_reshape(out, NULL, 1, &out), TR_ERR_NULL_ARG, "`shape`");
    CHECK_ERR(tr_tensor_cat(NULL, 2, 0, &out), TR_ERR_NULL_ARG, "`tensors`");
    CHECK_ERR(tr_tensor_stack(NULL, 1, 0, &out), TR_ERR_NULL_ARG, "`tensors`");
    CHECK_ERR(tr_optim_sgd_step(NULL, 1, 0.1), TR_ERR_NULL_ARG, "`params`");
    CHECK_EQ_U(out.id, 42); /* outputs are written only on success */
    CHECK_EQ_U(tr_live_handles(), live);

    REQUIRE_OK(new23(&t));
    CHECK_ERR(tr_tensor_copy_to(t, NULL, 24, &n), TR_ERR_NULL_ARG, "`buf`");
    CHECK_ERR(tr_tensor_shape(t, NULL, 2, &n), TR_ERR_NULL_ARG, "`dims`");
    CHECK_ERR(tr_tensor_sum_dim(t, NULL, 1, false, &out), TR_ERR_NULL_ARG, "`dims`");
    CHECK_EQ_U(n, 9);
    CHECK_EQ_U(out.id, 42);
    CHECK_OK(tr_tensor_release(t));

    /* NULL is fine with length 0: an empty tensor from no data, a scalar from no shape. */
    CHECK_OK(tr_tensor_from_data(NULL, 0, empty_shape, 1, TR_DTYPE_F32, &list[0]));
    CHECK_OK(tr_tensor_numel(list[0], &n));
    CHECK_EQ_U(n, 0);
    CHECK_OK(tr_tensor_from_data((const uint8_t *)data, sizeof(float), NULL, 0, TR_DTYPE_F32, &list[1]));
    CHECK_OK(tr_tensor_shape(list[1], NULL, 0, &n));
    CHECK_EQ_U(n, 0);
    CHECK_OK(tr_optim_sgd_step(NULL, 0, 0.1));
    CHECK_OK(tr_tensor_release(list[0]));
    CHECK_OK(tr_tensor_release(list[1]));
}

static void last_error_null_args(void) {
    char buf[16];
    size_t n = 0, before_len = 0, after_len = 0;
    tr_tensor bad = {0};
    CHECK_ERR(tr_tensor_retain(bad), TR_ERR_INVALID_HANDLE, "invalid tensor handle");
    CHECK(tr_last_error(NULL, 0, &before_len) == TR_ERR_BUFFER_TOO_SMALL);
    CHECK(tr_last_error(buf, sizeof buf, NULL) == TR_ERR_NULL_ARG);
    CHECK(tr_last_error(NULL, sizeof buf, &n) == TR_ERR_NULL_ARG);
    /* tr_last_error never changes the message, also when it fails itself. */
    CHECK(tr_last_error(NULL, 0, &after_len) == TR_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_U(after_len, before_len);
    CHECK(tu_contains(tu_last_error(), "invalid tensor handle"));
}

/* ------------------------------------------------------------------ bad handles */

static void stale_handle_and_double_release(void) {
    tr_tensor t = {0}, other = {0}, out = {42};
    size_t numel = 7;
    REQUIRE_OK(new23(&t));
    REQUIRE_OK(new23(&other));
    CHECK_OK(tr_tensor_release(t));
    CHECK(tu_valid(t) == 0);
    CHECK_ERR(tr_tensor_release(t), TR_ERR_STALE_HANDLE, "stale tensor handle");
    CHECK_ERR(tr_tensor_retain(t), TR_ERR_STALE_HANDLE, "released");
    CHECK_ERR(tr_tensor_add(other, t, &out), TR_ERR_STALE_HANDLE, "stale");
    CHECK_ERR(tr_tensor_numel(t, &numel), TR_ERR_STALE_HANDLE, "stale");
    CHECK_ERR(tr_tensor_alias(t, &out), TR_ERR_STALE_HANDLE, "stale");
    CHECK_ERR(tr_tensor_cat(&t, 1, 0, &out), TR_ERR_STALE_HANDLE, "stale");
    CHECK_ERR(tr_optim_sgd_step(&t, 1, 0.1), TR_ERR_STALE_HANDLE, "stale");
    CHECK_EQ_U(out.id, 42);
    CHECK_EQ_U(numel, 7);
    CHECK(tu_valid(other) == 1); /* the failed calls did not touch other handles */
    CHECK_OK(tr_tensor_release(other));
}

/* An old handle stays stale after its slot was reused by a new handle, and using it never
 * reaches the new one. The slot is the handle's low 32 bits (src/registry/handle.rs). */
static void stale_handle_after_slot_reuse(void) {
    enum { MAX = 1000 };
    static tr_tensor made[MAX];
    tr_tensor old = {0}, out = {42};
    int i, n = 0, reused = -1;
    REQUIRE_OK(new23(&old));
    CHECK_OK(tr_tensor_release(old));
    for (n = 0; n < MAX && reused < 0; n++) {
        REQUIRE_OK(new23(&made[n]));
        CHECK(made[n].id != old.id);
        if ((made[n].id & 0xffffffffu) == (old.id & 0xffffffffu)) reused = n;
    }
    CHECK(reused >= 0);
    if (reused >= 0) {
        tr_tensor fresh = made[reused];
        CHECK(tu_valid(old) == 0);
        CHECK_ERR(tr_tensor_release(old), TR_ERR_STALE_HANDLE, "stale");
        CHECK_ERR(tr_tensor_retain(old), TR_ERR_STALE_HANDLE, "stale");
        CHECK_ERR(tr_tensor_neg(old, &out), TR_ERR_STALE_HANDLE, "stale");
        CHECK_EQ_U(out.id, 42);
        CHECK(tu_valid(fresh) == 1); /* the releases of `old` did not hit the new handle */
    }
    for (i = 0; i < n; i++) CHECK_OK(tr_tensor_release(made[i]));
}

/* A disposed scope's handle stays disposed after its slot is reused by a new scope. */
static void stale_scope_after_slot_reuse(void) {
    enum { MAX = 200 };
    static tr_scope opened[MAX];
    tr_scope old = {0};
    tr_tensor t = {0};
    size_t len = 5;
    int i, n, reused = -1;
    REQUIRE_OK(tr_scope_new(&old));
    CHECK_OK(tr_scope_dispose(old));
    for (n = 0; n < MAX && reused < 0; n++) {
        REQUIRE_OK(tr_scope_new(&opened[n]));
        CHECK(opened[n].id != old.id);
        if ((opened[n].id & 0xffffffffu) == (old.id & 0xffffffffu)) reused = n;
    }
    CHECK(reused >= 0);
    REQUIRE_OK(new23(&t)); /* owned by the innermost new scope */
    CHECK_ERR(tr_scope_len(old, &len), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_ERR(tr_scope_attach(old, t), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_ERR(tr_tensor_move_to_scope(t, old), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_EQ_U(tu_owner(t), opened[n - 1].id);
    CHECK_EQ_U(len, 5);
    CHECK_OK(tr_scope_dispose(old)); /* still a no-op; must not close the reusing scope */
    if (reused >= 0) {
        CHECK_OK(tr_scope_len(opened[reused], &len));
    }
    for (i = n - 1; i >= 0; i--) CHECK_OK(tr_scope_dispose(opened[i]));
    CHECK(tu_valid(t) == 0);
}

static void scope_handle_as_tensor_and_back(void) {
    tr_scope s = {0}, as_scope = {0};
    tr_tensor t = {0}, as_tensor = {0}, out = {42};
    size_t len = 0;
    bool valid = true;
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(new23(&t));
    as_tensor.id = s.id;
    as_scope.id = t.id;
    CHECK_ERR(tr_tensor_neg(as_tensor, &out), TR_ERR_INVALID_HANDLE, "scope handle, not a tensor");
    CHECK_ERR(tr_tensor_retain(as_tensor), TR_ERR_INVALID_HANDLE, "scope handle");
    CHECK_ERR(tr_tensor_release(as_tensor), TR_ERR_INVALID_HANDLE, "scope handle");
    CHECK_OK(tr_tensor_is_valid(as_tensor, &valid));
    CHECK(!valid);
    CHECK_ERR(tr_scope_len(as_scope, &len), TR_ERR_INVALID_HANDLE, "tensor handle, not a scope");
    CHECK_ERR(tr_scope_attach(as_scope, t), TR_ERR_INVALID_HANDLE, "tensor handle");
    CHECK_ERR(tr_scope_dispose(as_scope), TR_ERR_INVALID_HANDLE, "tensor handle");
    CHECK_ERR(tr_tensor_move_to_scope(t, as_scope), TR_ERR_INVALID_HANDLE, "tensor handle");
    CHECK_EQ_U(out.id, 42);
    CHECK(tu_valid(t) == 1); /* disposing "t as a scope" did nothing to t */
    CHECK_EQ_U(tu_owner(t), s.id);
    CHECK_OK(tr_scope_dispose(s));
    /* After the scope is disposed its id still is no tensor handle. */
    CHECK_ERR(tr_tensor_neg(as_tensor, &out), TR_ERR_INVALID_HANDLE, "scope handle");
}

static void handle_zero(void) {
    tr_tensor zero = {0}, t = {0}, out = {42};
    tr_scope zscope = {0};
    size_t len = 3;
    bool valid = true;
    REQUIRE_OK(new23(&t));
    CHECK_ERR(tr_tensor_add(t, zero, &out), TR_ERR_INVALID_HANDLE, "invalid tensor handle 0x0");
    CHECK_ERR(tr_tensor_retain(zero), TR_ERR_INVALID_HANDLE, "invalid tensor handle");
    CHECK_ERR(tr_tensor_alias(zero, &out), TR_ERR_INVALID_HANDLE, "invalid tensor handle");
    CHECK_OK(tr_tensor_is_valid(zero, &valid));
    CHECK(!valid);
    CHECK_OK(tr_tensor_release(zero)); /* releasing handle 0 is a no-op */
    CHECK_OK(tr_scope_dispose(zscope)); /* so is disposing scope 0 */
    CHECK_ERR(tr_scope_len(zscope, &len), TR_ERR_INVALID_HANDLE, "invalid scope handle");
    CHECK_ERR(tr_scope_attach(zscope, t), TR_ERR_INVALID_HANDLE, "invalid scope handle");
    CHECK_EQ_U(out.id, 42);
    CHECK_EQ_U(len, 3);
    CHECK_OK(tr_tensor_release(t));
}

static void garbage_ids(void) {
    const uint64_t garbage[] = {
        1u,                              /* generation 0 */
        0xdeadbeefu,                     /* generation 0 */
        UINT64_MAX,                      /* top bit set */
        0x8000000100000000ull,           /* top bit set, otherwise plausible */
        0x3fffff0000000000ull | 3u,      /* a generation never issued */
        0x0000000100000000ull | 0x7ffffff0u, /* a slot never issued */
        0x0000000500000000ull | 0xfffffff0u,
    };
    size_t i, live;
    tr_tensor t = {0};
    tr_scope s = {0};
    REQUIRE_OK(new23(&t));
    REQUIRE_OK(tr_scope_new(&s));
    live = tr_live_handles();
    for (i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        tr_tensor g = {garbage[i]}, out = {42};
        tr_scope gs = {garbage[i]};
        size_t len = 3;
        bool valid = true;
        CHECK_ERR(tr_tensor_add(t, g, &out), TR_ERR_INVALID_HANDLE, "invalid tensor handle");
        CHECK_ERR(tr_tensor_release(g), TR_ERR_INVALID_HANDLE, "invalid");
        CHECK_ERR(tr_tensor_retain(g), TR_ERR_INVALID_HANDLE, "invalid");
        CHECK_OK(tr_tensor_is_valid(g, &valid));
        CHECK(!valid);
        CHECK_ERR(tr_scope_len(gs, &len), TR_ERR_INVALID_HANDLE, "invalid scope handle");
        CHECK_ERR(tr_scope_dispose(gs), TR_ERR_INVALID_HANDLE, "invalid scope handle");
        CHECK_ERR(tr_tensor_move_to_scope(t, gs), TR_ERR_INVALID_HANDLE, "invalid scope handle");
        CHECK_ERR(tr_scope_dispose_everything_but(s, &g, 1), TR_ERR_INVALID_HANDLE, "invalid tensor handle");
        CHECK_EQ_U(out.id, 42);
        CHECK_EQ_U(len, 3);
    }
    CHECK_EQ_U(tr_live_handles(), live);
    CHECK(tu_valid(t) == 1);
    CHECK_OK(tr_scope_dispose(s));
    CHECK_OK(tr_tensor_release(t));
}

/* ------------------------------------------------------------------ shapes, dtypes, data */

static void shape_mismatch(void) {
    const int64_t s23[2] = {2, 3}, s45[2] = {4, 5}, bad[2] = {4, 5};
    tr_tensor a = {0}, b = {0}, out = {42};
    double v = 0;
    size_t live;
    REQUIRE_OK(tr_tensor_ones(s23, 2, TR_DTYPE_F32, &a));
    REQUIRE_OK(tr_tensor_ones(s45, 2, TR_DTYPE_F32, &b));
    live = tr_live_handles();
    CHECK_ERR(tr_tensor_matmul(a, b, &out), TR_ERR_SHAPE, "2x3 and 4x5");
    CHECK_ERR(tr_tensor_add(a, b, &out), TR_ERR_SHAPE, "must match");
    CHECK_ERR(tr_tensor_reshape(a, bad, 2, &out), TR_ERR_SHAPE, "invalid for input of size 6");
    CHECK_ERR(tr_tensor_transpose(a, 0, 5, &out), TR_ERR_SHAPE, "out of range");
    CHECK_ERR(tr_tensor_item(a, &v), TR_ERR_SHAPE, "one element");
    CHECK_EQ_U(out.id, 42);
    CHECK_EQ_U(tr_live_handles(), live);
    CHECK_OK(tr_tensor_release(a));
    CHECK_OK(tr_tensor_release(b));
}

static void dtype_mismatch(void) {
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
    tr_tensor f = {0}, d = {0}, i = {0}, out = {42};
    REQUIRE_OK(tr_tensor_ones(s23, 2, TR_DTYPE_F32, &f));
    REQUIRE_OK(tr_tensor_ones(s32, 2, TR_DTYPE_F64, &d));
    REQUIRE_OK(tr_tensor_ones(s23, 2, TR_DTYPE_I64, &i));
    CHECK_ERR(tr_tensor_matmul(f, d, &out), TR_ERR_DTYPE, "dtype");
    CHECK_ERR(tr_tensor_embedding(f, f, &out), TR_ERR_DTYPE, "indices");
    CHECK_ERR(tr_tensor_requires_grad_(i, true), TR_ERR_DTYPE, "floating point");
    CHECK_EQ_U(out.id, 42);
    CHECK_OK(tr_tensor_release(f));
    CHECK_OK(tr_tensor_release(d));
    CHECK_OK(tr_tensor_release(i));
}

static void unknown_dtype_code(void) {
    const int64_t shape[1] = {2};
    const uint8_t bytes[16] = {0};
    tr_tensor t = {0}, out = {42};
    const tr_dtype bad[] = {-1, 8, 9, 12, 99, INT_MAX};
    size_t k, live = tr_live_handles();
    for (k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char code[32];
        snprintf(code, sizeof code, "dtype code %d", (int)bad[k]);
        CHECK_ERR(tr_tensor_zeros(shape, 1, bad[k], &out), TR_ERR_INVALID_ARG, code);
        CHECK_ERR(tr_tensor_from_data(bytes, 2, shape, 1, bad[k], &out), TR_ERR_INVALID_ARG, code);
        CHECK_ERR(tr_tensor_arange(0, 2, 1, bad[k], &out), TR_ERR_INVALID_ARG, code);
    }
    CHECK_EQ_U(tr_live_handles(), live);
    REQUIRE_OK(tr_tensor_zeros(shape, 1, TR_DTYPE_F32, &t));
    CHECK_ERR(tr_tensor_to_dtype(t, 42, &out), TR_ERR_INVALID_ARG, "unknown dtype code 42");
    CHECK_EQ_U(out.id, 42);
    CHECK_OK(tr_tensor_release(t));
}

static void from_data_bad_length_and_dims(void) {
    const int64_t shape[2] = {2, 3}, negative[2] = {2, -3};
    float data[7] = {0};
    tr_tensor out = {42};
    size_t live = tr_live_handles();
    CHECK_ERR(tr_tensor_from_data((const uint8_t *)data, 5 * sizeof(float), shape, 2, TR_DTYPE_F32, &out),
              TR_ERR_SHAPE, "needs 24 bytes, 20 were given");
    CHECK_ERR(tr_tensor_from_data((const uint8_t *)data, 7 * sizeof(float), shape, 2, TR_DTYPE_F32, &out),
              TR_ERR_SHAPE, "28 were given");
    CHECK_ERR(tr_tensor_from_data((const uint8_t *)data, 6 * sizeof(float), shape, 2, TR_DTYPE_F64, &out),
              TR_ERR_SHAPE, "48 bytes");
    CHECK_ERR(tr_tensor_from_data((const uint8_t *)data, 24, negative, 2, TR_DTYPE_F32, &out),
              TR_ERR_INVALID_ARG, "negative dimension");
    {
        const int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 4};
        CHECK_ERR(tr_tensor_from_data((const uint8_t *)data, 24, huge, 3, TR_DTYPE_F32, &out),
                  TR_ERR_INVALID_ARG, "overflows");
    }
    CHECK_EQ_U(out.id, 42);
    CHECK_EQ_U(tr_live_handles(), live);
}

/* ------------------------------------------------------------------ output buffers */

static void shape_buffer_too_small(void) {
    const int64_t s[3] = {2, 3, 4};
    int64_t dims[3] = {-7, -7, -7};
    size_t ndim = 0;
    tr_tensor t = {0};
    REQUIRE_OK(tr_tensor_zeros(s, 3, TR_DTYPE_F32, &t));
    CHECK_ERR(tr_tensor_shape(t, dims, 2, &ndim), TR_ERR_BUFFER_TOO_SMALL, "buffer too small");
    CHECK_EQ_U(ndim, 3); /* the needed size is still reported */
    CHECK(dims[0] == -7 && dims[1] == -7);
    ndim = 0;
    CHECK_ERR(tr_tensor_shape(t, NULL, 0, &ndim), TR_ERR_BUFFER_TOO_SMALL, "3");
    CHECK_EQ_U(ndim, 3);
    CHECK_OK(tr_tensor_shape(t, dims, 3, &ndim));
    CHECK(dims[0] == 2 && dims[1] == 3 && dims[2] == 4);
    CHECK_OK(tr_tensor_release(t));
}

static void copy_to_buffer_too_small(void) {
    const int64_t s[2] = {2, 3};
    uint8_t buf[24];
    size_t written = 0, k;
    int untouched = 1;
    tr_tensor t = {0};
    REQUIRE_OK(tr_tensor_ones(s, 2, TR_DTYPE_F32, &t));
    memset(buf, 0xab, sizeof buf);
    CHECK_ERR(tr_tensor_copy_to(t, buf, 23, &written), TR_ERR_BUFFER_TOO_SMALL, "24");
    CHECK_EQ_U(written, 24); /* bytes needed */
    for (k = 0; k < sizeof buf; k++) untouched &= buf[k] == 0xab;
    CHECK(untouched);
    written = 0;
    CHECK_ERR(tr_tensor_copy_to(t, NULL, 0, &written), TR_ERR_BUFFER_TOO_SMALL, "buffer too small");
    CHECK_EQ_U(written, 24);
    CHECK_OK(tr_tensor_copy_to(t, buf, sizeof buf, &written));
    CHECK_EQ_U(written, 24);
    CHECK_OK(tr_tensor_release(t));
}

static void last_error_buffer_too_small(void) {
    tr_tensor zero = {0};
    char buf[256];
    size_t n = 0, m = 0;
    int k, untouched = 1;
    CHECK_ERR(tr_tensor_retain(zero), TR_ERR_INVALID_HANDLE, NULL);
    CHECK(tr_last_error(NULL, 0, &n) == TR_ERR_BUFFER_TOO_SMALL);
    CHECK(n > 10 && n < sizeof buf);
    memset(buf, 'X', sizeof buf);
    /* n bytes leave no room for the NUL */
    CHECK(tr_last_error(buf, n, &m) == TR_ERR_BUFFER_TOO_SMALL);
    CHECK_EQ_U(m, n);
    for (k = 0; k < (int)sizeof buf; k++) untouched &= buf[k] == 'X';
    CHECK(untouched);
    m = 0;
    CHECK(tr_last_error(buf, n + 1, &m) == TR_OK);
    CHECK_EQ_U(m, n);
    CHECK_EQ_U(strlen(buf), n);
    CHECK(tu_contains(buf, "invalid tensor handle"));
}

/* The message is that of the last failed call: successful calls leave it alone. */
static void last_error_survives_success(void) {
    tr_tensor t = {0}, zero = {0};
    CHECK_ERR(tr_tensor_retain(zero), TR_ERR_INVALID_HANDLE, "invalid tensor handle");
    REQUIRE_OK(new23(&t));
    CHECK_OK(tr_tensor_release(t));
    CHECK(tu_contains(tu_last_error(), "invalid tensor handle"));
    CHECK_ERR(tr_tensor_release(t), TR_ERR_STALE_HANDLE, "stale");
}

/* ------------------------------------------------------------------ disposed scopes */

static void operations_on_disposed_scope(void) {
    tr_scope s = {0};
    tr_tensor t = {0}, keep[1];
    size_t len = 5;
    bool in = true;
    REQUIRE_OK(new23(&t));
    REQUIRE_OK(tr_scope_new(&s));
    CHECK_OK(tr_scope_dispose(s));
    keep[0] = t;
    CHECK_ERR(tr_scope_attach(s, t), TR_ERR_SCOPE_DISPOSED, "has been disposed");
    CHECK_ERR(tr_scope_detach(s, t), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_ERR(tr_scope_move_to_outer(s, t), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_ERR(tr_scope_contains(s, t, &in), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_ERR(tr_scope_len(s, &len), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_ERR(tr_scope_dispose_everything(s), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_ERR(tr_scope_dispose_everything_but(s, keep, 1), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_ERR(tr_tensor_move_to_scope(t, s), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_OK(tr_scope_dispose(s)); /* the one call that accepts it, as a no-op */
    CHECK_EQ_U(len, 5);
    CHECK(in);
    CHECK(tu_valid(t) == 1);
    CHECK_EQ_U(tu_owner(t), 0);
    CHECK_OK(tr_tensor_release(t));
}

/* ------------------------------------------------------------------ libtorch errors */

/* Ops with a scalar argument that libtorch rejects must return the mapped status with a
 * one-line message, never TR_ERR_PANIC with a C++ backtrace. */
static void scalar_op_errors_are_statuses_not_panics(void) {
    const int64_t s23[2] = {2, 3}, negative[2] = {2, -1};
    tr_tensor i = {0}, b = {0}, out = {42};
    size_t live;
    tr_status st;
    REQUIRE_OK(tr_tensor_zeros(s23, 2, TR_DTYPE_I64, &i));
    REQUIRE_OK(tr_tensor_zeros(s23, 2, TR_DTYPE_BOOL, &b));
    live = tr_live_handles();
    /* zeros with a negative dimension is TR_ERR_SHAPE; full must agree. */
    CHECK_ERR(tr_tensor_zeros(negative, 2, TR_DTYPE_F32, &out), TR_ERR_SHAPE, "non-negative");
    CHECK_ERR(tr_tensor_full(negative, 2, tr_scalar_float(1.0), TR_DTYPE_F32, &out), TR_ERR_SHAPE, "negative dimension");
    CHECK(!tu_contains(tu_last_error(), "Exception raised from"));
    st = tr_tensor_arange(0, 5, 0, TR_DTYPE_F32, &out);
    CHECK(st != TR_OK && st != TR_ERR_PANIC);
    CHECK(tu_contains(tu_last_error(), "step must be nonzero"));
    CHECK(!tu_contains(tu_last_error(), "Exception raised from"));
    st = tr_tensor_arange(5, 0, 1, TR_DTYPE_F32, &out);
    CHECK(st != TR_OK && st != TR_ERR_PANIC);
    CHECK(tu_contains(tu_last_error(), "step sign"));
    CHECK_ERR(tr_tensor_mul_scalar_(i, tr_scalar_float(0.5)), TR_ERR_DTYPE, "can't be cast");
    st = tr_tensor_sub_scalar(b, tr_scalar_float(1.0), &out);
    CHECK(st != TR_OK && st != TR_ERR_PANIC);
    CHECK(tu_contains(tu_last_error(), "bool tensor is not supported"));
    CHECK_EQ_U(out.id, 42);
    CHECK_EQ_U(tr_live_handles(), live);
    CHECK_OK(tr_tensor_release(i));
    CHECK_OK(tr_tensor_release(b));
}

/* Other libtorch rejections map to their group with libtorch's first line as the message. */
static void torch_errors_map_to_statuses(void) {
    const int64_t s23[2] = {2, 3};
    tr_tensor a = {0}, sum = {0}, out = {42};
    REQUIRE_OK(tr_tensor_ones(s23, 2, TR_DTYPE_F32, &a));
    REQUIRE_OK(tr_tensor_sum(a, &sum));
    CHECK_ERR(tr_tensor_eye(-1, TR_DTYPE_F32, &out), TR_ERR_TORCH, "n must be greater or equal to 0");
    CHECK_ERR(tr_tensor_dropout(a, 2.0, true, &out), TR_ERR_TORCH, "dropout probability");
    CHECK_ERR(tr_tensor_cat(&a, 0, 0, &out), TR_ERR_INVALID_ARG, "at least one tensor");  /* checked first */
    CHECK_ERR(tr_tensor_backward(sum), TR_ERR_TORCH, "does not require grad");
    CHECK(!tu_contains(tu_last_error(), "Exception raised from"));
    CHECK_EQ_U(out.id, 42);
    CHECK_OK(tr_tensor_release(sum));
    CHECK_OK(tr_tensor_release(a));
}

/* ------------------------------------------------------------------ status texts */

static void status_strings(void) {
    static const struct {
        int32_t code;
        const char *needle;
    } known[] = {
        {TR_OK, "ok"},
        {TR_ERR_NULL_ARG, "NULL"},
        {TR_ERR_INVALID_ARG, "invalid argument"},
        {TR_ERR_BUFFER_TOO_SMALL, "too small"},
        {TR_ERR_STALE_HANDLE, "stale"},
        {TR_ERR_INVALID_HANDLE, "invalid handle"},
        {TR_ERR_SCOPE_DISPOSED, "disposed"},
        {TR_ERR_SHAPE, "shape"},
        {TR_ERR_DTYPE, "dtype"},
        {TR_ERR_DEVICE, "device"},
        {TR_ERR_OUT_OF_MEMORY, "out of memory"},
        {TR_ERR_BUDGET_TOO_SMALL, "budget"},
        {TR_ERR_TORCH, "libtorch"},
        {TR_ERR_PANIC, "panic"},
    };
    const int32_t unknown[] = {-1, 1, 99, 103, 202, 999, INT32_MIN, INT32_MAX};
    const size_t nk = sizeof known / sizeof known[0];
    const char *unknown_text = tr_status_str(12345);
    size_t i, j;
    CHECK(unknown_text != NULL && tu_contains(unknown_text, "unknown"));
    for (i = 0; i < nk; i++) {
        const char *text = tr_status_str(known[i].code);
        CHECK(text != NULL);
        if (text == NULL) continue;
        CHECK(tu_contains(text, known[i].needle));
        CHECK(strcmp(text, unknown_text) != 0);
        CHECK(text == tr_status_str(known[i].code)); /* static text, same pointer every time */
        for (j = 0; j < i; j++) CHECK(strcmp(text, tr_status_str(known[j].code)) != 0);
    }
    for (i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *text = tr_status_str(unknown[i]);
        CHECK(text != NULL && strcmp(text, unknown_text) == 0);
    }
    /* The codes the contract fixes (never renumbered). */
    CHECK(TR_OK == 0 && TR_ERR_NULL_ARG == 100 && TR_ERR_INVALID_ARG == 101 &&
          TR_ERR_BUFFER_TOO_SMALL == 102 && TR_ERR_STALE_HANDLE == 200 &&
          TR_ERR_INVALID_HANDLE == 201 && TR_ERR_SCOPE_DISPOSED == 300 && TR_ERR_SHAPE == 400 &&
          TR_ERR_DTYPE == 401 && TR_ERR_DEVICE == 500 && TR_ERR_OUT_OF_MEMORY == 501 &&
          TR_ERR_BUDGET_TOO_SMALL == 502 && TR_ERR_TORCH == 600 && TR_ERR_PANIC == 900);
}

int main(void) {
    RUN(null_out_params);
    RUN(null_scope_out_params);
    RUN(null_data_and_shape);
    RUN(last_error_null_args);
    RUN(stale_handle_and_double_release);
    RUN(stale_handle_after_slot_reuse);
    RUN(stale_scope_after_slot_reuse);
    RUN(scope_handle_as_tensor_and_back);
    RUN(handle_zero);
    RUN(garbage_ids);
    RUN(shape_mismatch);
    RUN(dtype_mismatch);
    RUN(unknown_dtype_code);
    RUN(from_data_bad_length_and_dims);
    RUN(shape_buffer_too_small);
    RUN(copy_to_buffer_too_small);
    RUN(last_error_buffer_too_small);
    RUN(last_error_survives_success);
    RUN(operations_on_disposed_scope);
    RUN(torch_errors_map_to_statuses);
    RUN(scalar_op_errors_are_statuses_not_panics);
    RUN(status_strings);
    return tu_finish();
}

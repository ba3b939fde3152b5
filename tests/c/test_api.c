/*
 * The C API doing its job: versions, handle lifecycle (retain/release/alias), host data in and
 * out for every dtype in the header, and a few ops of each group of the header checked
 * numerically against values worked out by hand (creation, elementwise, reductions, linear
 * algebra, shape, cat/stack, nn layers, in-place ops, autograd, optimizers, grad mode).
 */
#define _POSIX_C_SOURCE 200809L

#include "test_util.h"

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* A new f32 tensor of the given shape holding `values` (row-major). */
static tr_status f32_tensor(const float *values, const int64_t *shape, size_t ndim, tr_tensor *out) {
    size_t n = 1, i;
    for (i = 0; i < ndim; i++) n *= (size_t)shape[i];
    return tr_tensor_from_data((const uint8_t *)values, n * sizeof(float), shape, ndim, TR_DTYPE_F32,
                               out);
}

/* Reads exactly `n` f32 elements of `t` into `out`; 1 on success. */
static int read_f32(tr_tensor t, float *out, size_t n) {
    size_t written = 0;
    tr_dtype dt = -1;
    if (tr_tensor_dtype(t, &dt) != TR_OK || dt != TR_DTYPE_F32) return 0;
    if (tr_tensor_copy_to(t, (uint8_t *)out, n * sizeof(float), &written) != TR_OK) return 0;
    return written == n * sizeof(float);
}

/* Checks `t` has exactly the f32 values `want` (within tol). */
#define CHECK_F32(t, tol, ...)                                                        \
    do {                                                                              \
        const float want_[] = {__VA_ARGS__};                                          \
        float got_[sizeof want_ / sizeof want_[0]];                                   \
        size_t i_, n_ = 0;                                                            \
        CHECK(read_f32((t), got_, sizeof want_ / sizeof want_[0]));                   \
        CHECK_OK(tr_tensor_numel((t), &n_));                                          \
        CHECK_EQ_U(n_, sizeof want_ / sizeof want_[0]);                               \
        for (i_ = 0; i_ < sizeof want_ / sizeof want_[0]; i_++)                       \
            CHECK_NEAR(got_[i_], want_[i_], (tol));                                   \
    } while (0)

/* Checks the shape of `t`. */
#define CHECK_SHAPE(t, ...)                                                           \
    do {                                                                              \
        const int64_t want_[] = {__VA_ARGS__};                                        \
        int64_t got_[8];                                                              \
        size_t nd_ = 0, i_;                                                           \
        CHECK_OK(tr_tensor_shape((t), got_, 8, &nd_));                                \
        CHECK_EQ_U(nd_, sizeof want_ / sizeof want_[0]);                              \
        for (i_ = 0; i_ < nd_ && i_ < sizeof want_ / sizeof want_[0]; i_++)           \
            CHECK(got_[i_] == want_[i_]);                                             \
    } while (0)

/* ------------------------------------------------------------------ versions */

static void versions_match_header(void) {
    const char *v = tr_version();
    unsigned major = 99, minor = 99, patch = 99, abi = 99;
    char expect[64];
    CHECK_EQ_U(tr_abi_version(), TR_ABI_VERSION);
    CHECK(v != NULL);
    if (v == NULL) return;
    CHECK(sscanf(v, "libtensorref %u.%u.%u (ABI %u", &major, &minor, &patch, &abi) == 4);
    CHECK_EQ_U(major, TR_VERSION_MAJOR);
    CHECK_EQ_U(minor, TR_VERSION_MINOR);
    CHECK_EQ_U(patch, TR_VERSION_PATCH);
    CHECK_EQ_U(abi, TR_ABI_VERSION);
    snprintf(expect, sizeof expect, "%d.%d.%d", TR_VERSION_MAJOR, TR_VERSION_MINOR, TR_VERSION_PATCH);
    CHECK(strstr(v, expect) != NULL);
    CHECK(tu_contains(v, "libtorch "));
    CHECK(tu_contains(v, "CUDA compiled in: yes") || tu_contains(v, "CUDA compiled in: no"));
    CHECK(v == tr_version()); /* static text */
}

/* ------------------------------------------------------------------ lifecycle */

static void retain_needs_one_release_each(void) {
    tr_tensor t = {0};
    size_t live = tr_live_handles();
    REQUIRE_OK(tu_new(&t));
    CHECK_EQ_U(tr_live_handles(), live + 1);
    CHECK_OK(tr_tensor_retain(t));
    CHECK_OK(tr_tensor_retain(t));
    CHECK_EQ_U(tr_live_handles(), live + 1); /* a reference is not a new handle */
    CHECK_OK(tr_tensor_release(t));
    CHECK(tu_valid(t) == 1);
    CHECK_OK(tr_tensor_release(t));
    CHECK(tu_valid(t) == 1);
    CHECK_OK(tr_tensor_release(t));
    CHECK(tu_valid(t) == 0);
    CHECK_EQ_U(tr_live_handles(), live);
    CHECK_ERR(tr_tensor_release(t), TR_ERR_STALE_HANDLE, "stale");
}

static void alias_shares_storage_with_own_life(void) {
    const float v[3] = {1, 2, 3};
    const int64_t shape[1] = {3};
    tr_tensor t = {0}, al = {0}, ones = {0};
    tr_scope s = {0};
    size_t live = tr_live_handles();
    REQUIRE_OK(f32_tensor(v, shape, 1, &t));
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tr_tensor_alias(t, &al));
    CHECK(al.id != t.id);
    CHECK_EQ_U(tr_live_handles(), live + 2);
    CHECK_EQ_U(tu_owner(al), s.id); /* the alias belongs to the current scope */
    CHECK_EQ_U(tu_owner(t), 0);
    CHECK_OK(tr_tensor_detach_from_scope(al));
    CHECK_OK(tr_scope_dispose(s));
    /* Same storage: an in-place change through one handle shows through the other. */
    REQUIRE_OK(tr_tensor_ones(shape, 1, TR_DTYPE_F32, &ones));
    CHECK_OK(tr_tensor_add_(al, ones));
    CHECK_F32(t, 0, 2, 3, 4);
    /* Releasing one alias leaves the other valid. */
    CHECK_OK(tr_tensor_release(t));
    CHECK(tu_valid(t) == 0);
    CHECK(tu_valid(al) == 1);
    CHECK_F32(al, 0, 2, 3, 4);
    CHECK_OK(tr_tensor_release(al));
    CHECK_OK(tr_tensor_release(ones));
    CHECK_EQ_U(tr_live_handles(), live);
}

static void live_bytes_follow_handles(void) {
    const int64_t shape[2] = {4, 8};
    uint64_t before = 0, now = 0;
    CHECK_OK(tr_live_bytes(TR_DEVICE_CPU, 0, &before));
    tr_tensor t = {0};
    REQUIRE_OK(tr_tensor_zeros(shape, 2, TR_DTYPE_F64, &t));
    CHECK_OK(tr_live_bytes(TR_DEVICE_CPU, 0, &now));
    CHECK_EQ_U(now, before + 4 * 8 * 8);
    CHECK_OK(tr_tensor_release(t));
    CHECK_OK(tr_live_bytes(TR_DEVICE_CPU, 0, &now));
    CHECK_EQ_U(now, before);
    CHECK_OK(tr_live_bytes(TR_DEVICE_CUDA, 0, &now)); /* no CUDA handle here, or none yet */
    CHECK_ERR(tr_live_bytes(TR_DEVICE_SIMULATED, 0, &now), TR_ERR_INVALID_ARG, "host memory");
    CHECK_ERR(tr_live_bytes(TR_DEVICE_CUDA, -1, &now), TR_ERR_INVALID_ARG, "device index -1");
    CHECK_ERR(tr_live_bytes((tr_device)7, 0, &now), TR_ERR_INVALID_ARG, "7");
    CHECK_ERR(tr_live_bytes(TR_DEVICE_CPU, 0, NULL), TR_ERR_NULL_ARG, "`out`");
}

/* ------------------------------------------------------------------ host data */

static void round_trip(tr_dtype dtype, size_t elem, const void *data, double first) {
    const int64_t shape[3] = {2, 1, 3};
    uint8_t back[6 * 8 + 8];
    size_t written = 0, numel = 0;
    tr_dtype got = -1;
    double item = -12345;
    tr_tensor t = {0}, one = {0};
    char name[32];
    snprintf(name, sizeof name, "dtype %d", (int)dtype);
    REQUIRE_OK(tr_tensor_from_data((const uint8_t *)data, 6 * elem, shape, 3, dtype, &t));
    CHECK_OK(tr_tensor_dtype(t, &got));
    CHECK(got == dtype);
    CHECK_OK(tr_tensor_numel(t, &numel));
    CHECK_EQ_U(numel, 6);
    CHECK_SHAPE(t, 2, 1, 3);
    memset(back, 0xcd, sizeof back);
    CHECK_OK(tr_tensor_copy_to(t, back, sizeof back, &written));
    CHECK_EQ_U(written, 6 * elem);
    if (memcmp(back, data, 6 * elem) != 0) tu_fail_here(__FILE__, __LINE__, name);
    CHECK(back[6 * elem] == 0xcd); /* nothing written past the data */
    /* The first element, read back as a double. */
    CHECK_OK(tr_tensor_narrow(t, 2, 0, 1, &one));
    {
        tr_tensor r = {0};
        const int64_t flat[1] = {-1};
        CHECK_OK(tr_tensor_reshape(one, flat, 1, &r));
        CHECK_OK(tr_tensor_narrow(r, 0, 0, 1, &r));
        CHECK_OK(tr_tensor_item(r, &item));
    }
    CHECK_NEAR(item, first, 0);
}

static void from_data_copy_to_every_dtype(void) {
    const uint8_t u8[6] = {0, 1, 2, 127, 200, 255};
    const int8_t i8[6] = {-128, -1, 0, 1, 64, 127};
    const int16_t i16[6] = {-32768, -300, 0, 1, 300, 32767};
    const int32_t i32[6] = {-2147483647 - 1, -70000, 0, 1, 70000, 2147483647};
    const int64_t i64[6] = {-9007199254740993LL, -1, 0, 1, 1LL << 40, 9223372036854775807LL};
    const uint16_t f16[6] = {0x3C00, 0x4000, 0xB800, 0x0000, 0x7BFF, 0x8001}; /* 1, 2, -0.5, 0, max, -tiny */
    const float f32[6] = {1.5f, -2.25f, 0.0f, 3.4e38f, -1e-30f, 7.0f};
    const double f64[6] = {-0.125, 1e300, -1e-300, 0.0, 2.5, 3.0};
    const bool b[6] = {true, false, true, true, false, false};
    const uint16_t bf16[6] = {0x3F80, 0xC000, 0x0000, 0x4049, 0x7F7F, 0xBF00}; /* 1, -2, 0, ~3.14, max, -0.5 */
    size_t live = tr_live_handles();
    tr_scope s = {0};
    REQUIRE_OK(tr_scope_new(&s)); /* owns every temporary of round_trip */
    CHECK(sizeof(bool) == 1);
    round_trip(TR_DTYPE_U8, 1, u8, 0);
    round_trip(TR_DTYPE_I8, 1, i8, -128);
    round_trip(TR_DTYPE_I16, 2, i16, -32768);
    round_trip(TR_DTYPE_I32, 4, i32, -2147483648.0);
    round_trip(TR_DTYPE_I64, 8, i64, -9007199254740992.0 /* nearest double */);
    round_trip(TR_DTYPE_F16, 2, f16, 1.0);
    round_trip(TR_DTYPE_F32, 4, f32, 1.5);
    round_trip(TR_DTYPE_F64, 8, f64, -0.125);
    round_trip(TR_DTYPE_BOOL, 1, b, 1.0);
    round_trip(TR_DTYPE_BF16, 2, bf16, 1.0);
    CHECK_OK(tr_scope_dispose(s));
    CHECK_EQ_U(tr_live_handles(), live);
}

/* copy_to gives contiguous row-major bytes also for a non-contiguous view. */
static void copy_to_of_a_transposed_view(void) {
    const float v[6] = {1, 2, 3, 4, 5, 6};
    const int64_t shape[2] = {2, 3};
    tr_tensor t = {0}, tt = {0}, c = {0};
    tr_scope s = {0};
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(f32_tensor(v, shape, 2, &t));
    REQUIRE_OK(tr_tensor_transpose(t, 0, 1, &tt));
    CHECK_SHAPE(tt, 3, 2);
    CHECK_F32(tt, 0, 1, 4, 2, 5, 3, 6);
    REQUIRE_OK(tr_tensor_contiguous(tt, &c));
    CHECK_F32(c, 0, 1, 4, 2, 5, 3, 6);
    CHECK_OK(tr_scope_dispose(s));
}

/* Host buffers need no alignment, and empty tensors copy zero bytes. */
static void unaligned_buffers_and_empty_tensors(void) {
    const double v[3] = {1.5, -2.25, 3};
    const int64_t shape[1] = {3}, empty[2] = {0, 5};
    unsigned char in[32], out[32];
    double back[3] = {0, 0, 0};
    size_t written = 9;
    tr_tensor t = {0}, e = {0};
    memcpy(in + 1, v, sizeof v);
    REQUIRE_OK(tr_tensor_from_data(in + 1, sizeof v, shape, 1, TR_DTYPE_F64, &t));
    CHECK_OK(tr_tensor_copy_to(t, out + 3, sizeof v, &written));
    CHECK_EQ_U(written, sizeof v);
    memcpy(back, out + 3, sizeof back);
    CHECK(back[0] == 1.5 && back[1] == -2.25 && back[2] == 3);
    CHECK_OK(tr_tensor_release(t));
    REQUIRE_OK(tr_tensor_zeros(empty, 2, TR_DTYPE_F32, &e));
    written = 9;
    CHECK_OK(tr_tensor_copy_to(e, NULL, 0, &written));
    CHECK_EQ_U(written, 0);
    CHECK_SHAPE(e, 0, 5);
    CHECK_OK(tr_tensor_release(e));
}

/* ------------------------------------------------------------------ creation */

static void creation_ops(void) {
    const int64_t shape[2] = {2, 3}, big[1] = {20000};
    tr_tensor z = {0}, o = {0}, f = {0}, ar = {0}, e = {0}, zl = {0}, ol = {0}, ai = {0};
    tr_tensor r1 = {0}, r2 = {0}, r3 = {0}, n1 = {0}, n2 = {0}, m = {0}, sq = {0}, v = {0};
    float a[6], b[6];
    tr_dtype dt = -1;
    tr_scope s = {0};
    double mean = 1, var = 0;
    int i, in_range = 1;
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tr_tensor_zeros(shape, 2, TR_DTYPE_F32, &z));
    CHECK_F32(z, 0, 0, 0, 0, 0, 0, 0);
    REQUIRE_OK(tr_tensor_ones(shape, 2, TR_DTYPE_F32, &o));
    CHECK_F32(o, 0, 1, 1, 1, 1, 1, 1);
    REQUIRE_OK(tr_tensor_full(shape, 2, tr_scalar_float(-2.5), TR_DTYPE_F32, &f));
    CHECK_F32(f, 0, -2.5f, -2.5f, -2.5f, -2.5f, -2.5f, -2.5f);
    REQUIRE_OK(tr_tensor_arange(1, 3, 0.5, TR_DTYPE_F32, &ar));
    CHECK_F32(ar, 0, 1, 1.5f, 2, 2.5f);
    REQUIRE_OK(tr_tensor_arange(0, 4, 1, TR_DTYPE_I64, &ai));
    CHECK_OK(tr_tensor_dtype(ai, &dt));
    CHECK(dt == TR_DTYPE_I64);
    REQUIRE_OK(tr_tensor_eye(3, TR_DTYPE_F32, &e));
    CHECK_F32(e, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1);
    REQUIRE_OK(tr_tensor_zeros_like(f, &zl));
    CHECK_SHAPE(zl, 2, 3);
    CHECK_F32(zl, 0, 0, 0, 0, 0, 0, 0);
    REQUIRE_OK(tr_tensor_ones_like(ai, &ol));
    CHECK_OK(tr_tensor_dtype(ol, &dt));
    CHECK(dt == TR_DTYPE_I64);

    /* tr_manual_seed makes rand and randn reproducible. */
    CHECK_OK(tr_manual_seed(42));
    REQUIRE_OK(tr_tensor_rand(shape, 2, TR_DTYPE_F32, &r1));
    CHECK_OK(tr_manual_seed(42));
    REQUIRE_OK(tr_tensor_rand(shape, 2, TR_DTYPE_F32, &r2));
    CHECK_OK(tr_manual_seed(43));
    REQUIRE_OK(tr_tensor_rand(shape, 2, TR_DTYPE_F32, &r3));
    CHECK(read_f32(r1, a, 6) && read_f32(r2, b, 6));
    CHECK(memcmp(a, b, sizeof a) == 0);
    for (i = 0; i < 6; i++) in_range &= a[i] >= 0.0f && a[i] < 1.0f;
    CHECK(in_range);
    CHECK(read_f32(r3, b, 6));
    CHECK(memcmp(a, b, sizeof a) != 0);
    CHECK_OK(tr_manual_seed(7));
    REQUIRE_OK(tr_tensor_randn(shape, 2, TR_DTYPE_F32, &n1));
    CHECK_OK(tr_manual_seed(7));
    REQUIRE_OK(tr_tensor_randn(shape, 2, TR_DTYPE_F32, &n2));
    CHECK(read_f32(n1, a, 6) && read_f32(n2, b, 6));
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* randn: mean ~0, variance ~1 over 20000 samples. */
    REQUIRE_OK(tr_tensor_randn(big, 1, TR_DTYPE_F64, &v));
    REQUIRE_OK(tr_tensor_mean(v, &m));
    CHECK_OK(tr_tensor_item(m, &mean));
    CHECK_NEAR(mean, 0, 0.05);
    REQUIRE_OK(tr_tensor_mul(v, v, &sq));
    REQUIRE_OK(tr_tensor_mean(sq, &m));
    CHECK_OK(tr_tensor_item(m, &var));
    CHECK_NEAR(var, 1, 0.05);
    CHECK_OK(tr_scope_dispose(s));
}

/* ------------------------------------------------------------------ elementwise */

static void elementwise_ops(void) {
    const float av[4] = {1, -2, 3, 4}, bv[4] = {2, 2, -1, 0.5f};
    const int64_t shape[1] = {4}, col[2] = {4, 1}, row[2] = {1, 2};
    const float rv[2] = {10, 20};
    const bool cond[4] = {true, false, false, true};
    tr_tensor a = {0}, b = {0}, r = {0}, c = {0}, cv = {0}, rw = {0}, cl = {0};
    tr_dtype dt = -1;
    tr_scope s = {0};
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(f32_tensor(av, shape, 1, &a));
    REQUIRE_OK(f32_tensor(bv, shape, 1, &b));
    CHECK_OK(tr_tensor_add(a, b, &r));
    CHECK_F32(r, 0, 3, 0, 2, 4.5f);
    CHECK_OK(tr_tensor_sub(a, b, &r));
    CHECK_F32(r, 0, -1, -4, 4, 3.5f);
    CHECK_OK(tr_tensor_mul(a, b, &r));
    CHECK_F32(r, 0, 2, -4, -3, 2);
    CHECK_OK(tr_tensor_div(a, b, &r));
    CHECK_F32(r, 1e-6, 0.5f, -1, -3, 8);
    CHECK_OK(tr_tensor_add_scalar(a, tr_scalar_float(1), &r));
    CHECK_F32(r, 0, 2, -1, 4, 5);
    CHECK_OK(tr_tensor_sub_scalar(a, tr_scalar_float(1), &r));
    CHECK_F32(r, 0, 0, -3, 2, 3);
    CHECK_OK(tr_tensor_mul_scalar(a, tr_scalar_float(-2), &r));
    CHECK_F32(r, 0, -2, 4, -6, -8);
    CHECK_OK(tr_tensor_div_scalar(a, tr_scalar_float(4), &r));
    CHECK_F32(r, 0, 0.25f, -0.5f, 0.75f, 1);
    CHECK_OK(tr_tensor_pow_scalar(a, tr_scalar_float(2), &r));
    CHECK_F32(r, 1e-5, 1, 4, 9, 16);
    CHECK_OK(tr_tensor_pow(b, b, &r));
    CHECK_F32(r, 1e-5, 4, 4, -1, 0.70710678f);
    CHECK_OK(tr_tensor_neg(a, &r));
    CHECK_F32(r, 0, -1, 2, -3, -4);
    CHECK_OK(tr_tensor_abs(a, &r));
    CHECK_F32(r, 0, 1, 2, 3, 4);
    CHECK_OK(tr_tensor_exp(b, &r));
    CHECK_F32(r, 1e-4, 7.3890561f, 7.3890561f, 0.36787944f, 1.6487213f);
    CHECK_OK(tr_tensor_abs(a, &c));
    CHECK_OK(tr_tensor_log(c, &r));
    CHECK_F32(r, 1e-5, 0, 0.69314718f, 1.0986123f, 1.3862944f);
    CHECK_OK(tr_tensor_sqrt(c, &r));
    CHECK_F32(r, 1e-5, 1, 1.4142136f, 1.7320508f, 2);
    CHECK_OK(tr_tensor_relu(a, &r));
    CHECK_F32(r, 0, 1, 0, 3, 4);
    CHECK_OK(tr_tensor_sigmoid(a, &r));
    CHECK_F32(r, 1e-5, 0.73105858f, 0.11920292f, 0.95257413f, 0.98201379f);
    CHECK_OK(tr_tensor_tanh(a, &r));
    CHECK_F32(r, 1e-5, 0.76159416f, -0.96402758f, 0.99505475f, 0.99932930f);
    CHECK_OK(tr_tensor_gelu(a, &r));
    CHECK_F32(r, 1e-5, 0.84134475f, -0.04550026f, 2.99595031f, 3.99987332f);
    CHECK_OK(tr_tensor_silu(a, &r));
    CHECK_F32(r, 1e-5, 0.73105858f, -0.23840584f, 2.85772238f, 3.92805516f);
    CHECK_OK(tr_tensor_clamp(a, tr_scalar_float(-1), tr_scalar_float(2.5), &r));
    CHECK_F32(r, 0, 1, -1, 2.5f, 2.5f);
    REQUIRE_OK(tr_tensor_from_data((const uint8_t *)cond, sizeof cond, shape, 1, TR_DTYPE_BOOL, &cv));
    CHECK_OK(tr_tensor_where_self(a, cv, b, &r));
    CHECK_F32(r, 0, 1, 2, -1, 4);
    /* comparisons give bool tensors */
    {
        bool got[4] = {false, false, false, false};
        size_t w = 0;
        CHECK_OK(tr_tensor_lt(a, b, &r));
        CHECK_OK(tr_tensor_dtype(r, &dt));
        CHECK(dt == TR_DTYPE_BOOL);
        CHECK_OK(tr_tensor_copy_to(r, (uint8_t *)got, sizeof got, &w));
        CHECK(got[0] && got[1] && !got[2] && !got[3]);
        CHECK_OK(tr_tensor_eq(a, a, &r));
        CHECK_OK(tr_tensor_copy_to(r, (uint8_t *)got, sizeof got, &w));
        CHECK(got[0] && got[1] && got[2] && got[3]);
        CHECK_OK(tr_tensor_ge(a, b, &r));
        CHECK_OK(tr_tensor_copy_to(r, (uint8_t *)got, sizeof got, &w));
        CHECK(!got[0] && !got[1] && got[2] && got[3]);
        CHECK_OK(tr_tensor_ne(a, b, &r));
        CHECK_OK(tr_tensor_copy_to(r, (uint8_t *)got, sizeof got, &w));
        CHECK(got[0] && got[1] && got[2] && got[3]);
    }
    /* broadcasting: [4,1] + [1,2] -> [4,2] */
    REQUIRE_OK(f32_tensor(av, col, 2, &cl));
    REQUIRE_OK(f32_tensor(rv, row, 2, &rw));
    CHECK_OK(tr_tensor_add(cl, rw, &r));
    CHECK_SHAPE(r, 4, 2);
    CHECK_F32(r, 0, 11, 21, 8, 18, 13, 23, 14, 24);
    CHECK_OK(tr_scope_dispose(s));
}

/* ------------------------------------------------------------------ reductions */

static void reductions_with_dim_and_keepdim(void) {
    const float v[6] = {1, 5, 3, 4, 2, 6};
    const int64_t shape[2] = {2, 3}, d1[1] = {1}, d0[1] = {0}, both[2] = {0, 1};
    tr_tensor t = {0}, r = {0};
    double x = 0;
    tr_scope s = {0};
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(f32_tensor(v, shape, 2, &t));
    CHECK_OK(tr_tensor_sum(t, &r));
    CHECK_OK(tr_tensor_item(r, &x));
    CHECK_NEAR(x, 21, 0);
    CHECK_OK(tr_tensor_mean(t, &r));
    CHECK_OK(tr_tensor_item(r, &x));
    CHECK_NEAR(x, 3.5, 1e-6);
    CHECK_OK(tr_tensor_sum_dim(t, d1, 1, false, &r));
    CHECK_SHAPE(r, 2);
    CHECK_F32(r, 0, 9, 12);
    CHECK_OK(tr_tensor_sum_dim(t, d1, 1, true, &r));
    CHECK_SHAPE(r, 2, 1);
    CHECK_OK(tr_tensor_sum_dim(t, both, 2, false, &r));
    {
        size_t nd = 9;
        CHECK_OK(tr_tensor_shape(r, NULL, 0, &nd)); /* a 0-d result */
        CHECK_EQ_U(nd, 0);
    }
    CHECK_F32(r, 0, 21);
    CHECK_OK(tr_tensor_mean_dim(t, d0, 1, true, &r));
    CHECK_SHAPE(r, 1, 3);
    CHECK_F32(r, 1e-6, 2.5f, 3.5f, 4.5f);
    CHECK_OK(tr_tensor_max(t, &r));
    CHECK_F32(r, 0, 6);
    CHECK_OK(tr_tensor_min(t, &r));
    CHECK_F32(r, 0, 1);
    CHECK_OK(tr_tensor_max_dim(t, 1, false, &r));
    CHECK_F32(r, 0, 5, 6);
    CHECK_OK(tr_tensor_min_dim(t, 0, true, &r));
    CHECK_SHAPE(r, 1, 3);
    CHECK_F32(r, 0, 1, 2, 3);
    {
        int64_t idx[3] = {-1, -1, -1};
        size_t w = 0;
        tr_dtype dt = -1;
        CHECK_OK(tr_tensor_argmax(t, 1, false, &r));
        CHECK_OK(tr_tensor_dtype(r, &dt));
        CHECK(dt == TR_DTYPE_I64);
        CHECK_OK(tr_tensor_copy_to(r, (uint8_t *)idx, sizeof idx, &w));
        CHECK_EQ_U(w, 2 * sizeof(int64_t));
        CHECK(idx[0] == 1 && idx[1] == 2);
        CHECK_OK(tr_tensor_argmin(t, 0, false, &r));
        CHECK_OK(tr_tensor_copy_to(r, (uint8_t *)idx, sizeof idx, &w));
        CHECK(idx[0] == 0 && idx[1] == 1 && idx[2] == 0);
    }
    CHECK_OK(tr_tensor_softmax(t, 1, &r));
    CHECK_F32(r, 1e-5, 0.01587624f, 0.86681333f, 0.11731043f, 0.11731043f, 0.01587624f, 0.86681333f);
    CHECK_OK(tr_tensor_log_softmax(t, 1, &r));
    CHECK_F32(r, 1e-5, -4.14293785f, -0.14293785f, -2.14293785f, -2.14293785f, -4.14293785f, -0.14293785f);
    CHECK_OK(tr_scope_dispose(s));
}

/* ------------------------------------------------------------------ linear algebra */

static void matmul_bmm_linear(void) {
    const float av[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {1, 0, 0, 1, 1, 1};
    const float wv[6] = {1, 0, -1, 2, 1, 0}, biasv[2] = {0.5f, -1};
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s123[3] = {1, 2, 3}, s132[3] = {1, 3, 2};
    const int64_t s2[1] = {2};
    tr_tensor a = {0}, b = {0}, r = {0}, a3 = {0}, b3 = {0}, w = {0}, bias = {0}, none = {0};
    tr_scope s = {0};
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(f32_tensor(av, s23, 2, &a));
    REQUIRE_OK(f32_tensor(bv, s32, 2, &b));
    CHECK_OK(tr_tensor_matmul(a, b, &r));
    CHECK_SHAPE(r, 2, 2);
    CHECK_F32(r, 0, 4, 5, 10, 11);
    REQUIRE_OK(f32_tensor(av, s123, 3, &a3));
    REQUIRE_OK(f32_tensor(bv, s132, 3, &b3));
    CHECK_OK(tr_tensor_bmm(a3, b3, &r));
    CHECK_SHAPE(r, 1, 2, 2);
    CHECK_F32(r, 0, 4, 5, 10, 11);
    /* linear: x [2,3] @ W^T [3,2] + b */
    REQUIRE_OK(f32_tensor(wv, s23, 2, &w));
    REQUIRE_OK(f32_tensor(biasv, s2, 1, &bias));
    CHECK_OK(tr_tensor_linear(a, w, bias, &r));
    CHECK_F32(r, 0, -1.5f, 3, -1.5f, 12);
    CHECK_OK(tr_tensor_linear(a, w, none, &r)); /* handle 0: no bias */
    CHECK_F32(r, 0, -2, 4, -2, 13);
    CHECK_OK(tr_scope_dispose(s));
}

/* ------------------------------------------------------------------ shape ops */

static void shape_ops(void) {
    const float v[6] = {1, 2, 3, 4, 5, 6};
    const int64_t s23[2] = {2, 3}, infer[2] = {3, -1}, flat[1] = {6}, perm[2] = {1, 0};
    const int64_t idxv[2] = {2, 0}, s2[1] = {2};
    tr_tensor t = {0}, r = {0}, u = {0}, idx = {0};
    tr_dtype dt = -1;
    tr_scope s = {0};
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(f32_tensor(v, s23, 2, &t));
    CHECK_OK(tr_tensor_reshape(t, infer, 2, &r));
    CHECK_SHAPE(r, 3, 2);
    CHECK_F32(r, 0, 1, 2, 3, 4, 5, 6);
    CHECK_OK(tr_tensor_view(t, flat, 1, &r));
    CHECK_SHAPE(r, 6);
    CHECK_OK(tr_tensor_permute(t, perm, 2, &r));
    CHECK_SHAPE(r, 3, 2);
    CHECK_F32(r, 0, 1, 4, 2, 5, 3, 6);
    CHECK_OK(tr_tensor_unsqueeze(t, 0, &u));
    CHECK_SHAPE(u, 1, 2, 3);
    CHECK_OK(tr_tensor_squeeze(u, 0, &r));
    CHECK_SHAPE(r, 2, 3);
    CHECK_OK(tr_tensor_squeeze(t, 0, &r)); /* size 2: unchanged */
    CHECK_SHAPE(r, 2, 3);
    CHECK_OK(tr_tensor_narrow(t, 1, 1, 2, &r));
    CHECK_SHAPE(r, 2, 2);
    CHECK_F32(r, 0, 2, 3, 5, 6);
    REQUIRE_OK(tr_tensor_from_data((const uint8_t *)idxv, sizeof idxv, s2, 1, TR_DTYPE_I64, &idx));
    CHECK_OK(tr_tensor_index_select(t, 1, idx, &r));
    CHECK_F32(r, 0, 3, 1, 6, 4);
    CHECK_OK(tr_tensor_to_dtype(t, TR_DTYPE_I32, &r));
    CHECK_OK(tr_tensor_dtype(r, &dt));
    CHECK(dt == TR_DTYPE_I32);
    {
        int32_t iv[6] = {0};
        size_t w = 0;
        CHECK_OK(tr_tensor_copy_to(r, (uint8_t *)iv, sizeof iv, &w));
        CHECK(iv[0] == 1 && iv[5] == 6);
    }
    CHECK_OK(tr_scope_dispose(s));
}

static void cat_and_stack(void) {
    const float av[4] = {1, 2, 3, 4}, bv[2] = {5, 6};
    const int64_t s22[2] = {2, 2}, s12[2] = {1, 2};
    tr_tensor a = {0}, b = {0}, list[2], r = {0};
    tr_scope s = {0};
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(f32_tensor(av, s22, 2, &a));
    REQUIRE_OK(f32_tensor(bv, s12, 2, &b));
    list[0] = a;
    list[1] = b;
    CHECK_OK(tr_tensor_cat(list, 2, 0, &r));
    CHECK_SHAPE(r, 3, 2);
    CHECK_F32(r, 0, 1, 2, 3, 4, 5, 6);
    CHECK_ERR(tr_tensor_cat(list, 2, 1, &r), TR_ERR_SHAPE, "size");
    list[1] = a;
    CHECK_OK(tr_tensor_stack(list, 2, 0, &r));
    CHECK_SHAPE(r, 2, 2, 2);
    CHECK_OK(tr_tensor_stack(list, 2, 2, &r));
    CHECK_SHAPE(r, 2, 2, 2);
    CHECK_F32(r, 0, 1, 1, 2, 2, 3, 3, 4, 4);
    CHECK_OK(tr_scope_dispose(s));
}

/* ------------------------------------------------------------------ typed scalars */

/* An integer scalar keeps an integer tensor integer and is exact to 64 bits; a float promotes it
 * to float32; an unknown kind is an argument error; item_scalar reads an integer exactly. */
static void scalars_keep_their_type(void) {
    const int64_t big[1] = {(int64_t)1 << 60}, one = 1;
    tr_tensor a = {0}, r = {0};
    tr_dtype dt = -1;
    tr_scalar v = tr_scalar_bool(false);
    int64_t got = 0;
    tr_device device = TR_DEVICE_CUDA;
    int32_t index = -1;
    tr_scope s = {0};
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tr_tensor_from_data((const uint8_t *)big, sizeof big, &one, 1, TR_DTYPE_I64, &a));
    CHECK_OK(tr_tensor_add_scalar(a, tr_scalar_int(1), &r));
    CHECK_OK(tr_tensor_dtype(r, &dt));
    CHECK(dt == TR_DTYPE_I64);
    CHECK_OK(tr_tensor_item_scalar(r, &v));
    CHECK(v.kind == TR_SCALAR_KIND_INT && v.i == ((int64_t)1 << 60) + 1);
    CHECK_OK(tr_tensor_copy_to(r, (uint8_t *)&got, sizeof got, &(size_t){0}));
    CHECK(got == ((int64_t)1 << 60) + 1);
    CHECK_OK(tr_tensor_add_scalar(a, tr_scalar_float(0.5), &r));
    CHECK_OK(tr_tensor_dtype(r, &dt));
    CHECK(dt == TR_DTYPE_F32);
    CHECK_OK(tr_tensor_full(&one, 1, tr_scalar_int(((int64_t)1 << 62) + 1), TR_DTYPE_I64, &r));
    CHECK_OK(tr_tensor_item_scalar(r, &v));
    CHECK(v.kind == TR_SCALAR_KIND_INT && v.i == ((int64_t)1 << 62) + 1);
    CHECK_ERR(tr_tensor_full(&one, 1, tr_scalar_float(1.0 / 0.0), TR_DTYPE_I64, &r), TR_ERR_INVALID_ARG, "does not fit");
    CHECK_ERR(tr_tensor_add_scalar(a, (tr_scalar){.kind = 7}, &r), TR_ERR_INVALID_ARG, "unknown scalar kind 7");
    CHECK_ERR(tr_tensor_item_scalar(a, NULL), TR_ERR_NULL_ARG, "`out`");
    CHECK_OK(tr_tensor_device(a, &device, &index));
    CHECK(device == TR_DEVICE_CPU && index == 0);
    CHECK_ERR(tr_tensor_device(a, &device, NULL), TR_ERR_NULL_ARG, "`index`");
    CHECK_OK(tr_scope_dispose(s));
}

/* ------------------------------------------------------------------ nn ops */

static void nn_ops(void) {
    const float emb[6] = {0, 1, 10, 11, 20, 21}, xv[4] = {1, 2, 3, 4};
    const int64_t ids[3] = {2, 0, 2}, s32[2] = {3, 2}, s3[1] = {3}, s14[2] = {1, 4}, ln[1] = {4};
    const int64_t img[4] = {1, 1, 3, 3}, ker[4] = {1, 1, 2, 2}, one2[2] = {1, 1}, zero2[2] = {0, 0};
    const int64_t k2[2] = {2, 2};
    const float imgv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const float logits[4] = {0, 0, 0, 0}, predv[2] = {1, 3}, targv[2] = {2, 1};
    const int64_t s24[2] = {2, 2}, s2[1] = {2};
    tr_tensor w = {0}, idx = {0}, r = {0}, x = {0}, im = {0}, k = {0}, none = {0};
    tr_tensor lg = {0}, tg = {0}, p = {0}, q = {0};
    double v = 0;
    tr_scope s = {0};
    REQUIRE_OK(tr_scope_new(&s));
    /* embedding */
    REQUIRE_OK(f32_tensor(emb, s32, 2, &w));
    REQUIRE_OK(tr_tensor_from_data((const uint8_t *)ids, sizeof ids, s3, 1, TR_DTYPE_I64, &idx));
    CHECK_OK(tr_tensor_embedding(w, idx, &r));
    CHECK_SHAPE(r, 3, 2);
    CHECK_F32(r, 0, 20, 21, 0, 1, 20, 21);
    /* layer_norm without affine: mean 2.5, var 1.25 */
    REQUIRE_OK(f32_tensor(xv, s14, 2, &x));
    CHECK_OK(tr_tensor_layer_norm(x, ln, 1, none, none, 1e-5, &r));
    CHECK_F32(r, 1e-4, -1.3416355f, -0.4472118f, 0.4472118f, 1.3416355f);
    /* dropout: identity when not training; zeros or 1/(1-p) scaling when training */
    CHECK_OK(tr_tensor_dropout(x, 0.5, false, &r));
    CHECK_F32(r, 0, 1, 2, 3, 4);
    CHECK_OK(tr_manual_seed(1));
    CHECK_OK(tr_tensor_dropout(x, 0.5, true, &r));
    {
        float d[4];
        int i, ok = 1;
        CHECK(read_f32(r, d, 4));
        for (i = 0; i < 4; i++) ok &= d[i] == 0.0f || d[i] == 2.0f * xv[i];
        CHECK(ok);
    }
    /* conv2d: 3x3 image, 2x2 kernel of ones -> sums of 2x2 windows */
    REQUIRE_OK(f32_tensor(imgv, img, 4, &im));
    REQUIRE_OK(tr_tensor_ones(ker, 4, TR_DTYPE_F32, &k));
    CHECK_OK(tr_tensor_conv2d(im, k, none, one2, 2, zero2, 2, one2, 2, 1, &r));
    CHECK_SHAPE(r, 1, 1, 2, 2);
    CHECK_F32(r, 0, 12, 16, 24, 28);
    CHECK_OK(tr_tensor_max_pool2d(im, k2, 2, one2, 2, zero2, 2, one2, 2, false, &r));
    CHECK_SHAPE(r, 1, 1, 2, 2);
    CHECK_F32(r, 0, 5, 6, 8, 9);
    /* mse: ((1-2)^2 + (3-1)^2) / 2 = 2.5 */
    REQUIRE_OK(f32_tensor(predv, s2, 1, &p));
    REQUIRE_OK(f32_tensor(targv, s2, 1, &q));
    CHECK_OK(tr_tensor_mse_loss(p, q, &r));
    CHECK_OK(tr_tensor_item(r, &v));
    CHECK_NEAR(v, 2.5, 1e-6);
    /* cross-entropy of uniform logits over 2 classes = ln 2 */
    REQUIRE_OK(f32_tensor(logits, s24, 2, &lg));
    {
        const int64_t t2[2] = {0, 1};
        REQUIRE_OK(tr_tensor_from_data((const uint8_t *)t2, sizeof t2, s2, 1, TR_DTYPE_I64, &tg));
    }
    CHECK_OK(tr_tensor_cross_entropy(lg, tg, &r));
    CHECK_OK(tr_tensor_item(r, &v));
    CHECK_NEAR(v, 0.69314718, 1e-6);
    CHECK_OK(tr_scope_dispose(s));
}

/* ------------------------------------------------------------------ in-place ops */

static void in_place_ops_register_nothing(void) {
    const float av[3] = {1, 2, 3}, bv[3] = {10, 20, 30};
    const int64_t shape[1] = {3};
    tr_tensor a = {0}, b = {0}, two = {0};
    tr_scope s = {0};
    size_t live, len_before = 0, len_after = 0;
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(f32_tensor(av, shape, 1, &a));
    REQUIRE_OK(f32_tensor(bv, shape, 1, &b));
    REQUIRE_OK(tr_tensor_full(shape, 1, tr_scalar_float(2), TR_DTYPE_F32, &two));
    live = tr_live_handles();
    CHECK_OK(tr_scope_len(s, &len_before));
    CHECK_OK(tr_tensor_add_(a, b));
    CHECK_F32(a, 0, 11, 22, 33);
    CHECK_OK(tr_tensor_sub_(a, two));
    CHECK_F32(a, 0, 9, 20, 31);
    CHECK_OK(tr_tensor_mul_(a, two));
    CHECK_F32(a, 0, 18, 40, 62);
    CHECK_OK(tr_tensor_mul_scalar_(a, tr_scalar_float(0.5)));
    CHECK_F32(a, 0, 9, 20, 31);
    CHECK_OK(tr_tensor_copy_(a, b));
    CHECK_F32(a, 0, 10, 20, 30);
    CHECK_OK(tr_tensor_zero_(a));
    CHECK_F32(a, 0, 0, 0, 0);
    CHECK_F32(b, 0, 10, 20, 30); /* the other operand is untouched */
    CHECK_EQ_U(tr_live_handles(), live);
    CHECK_OK(tr_scope_len(s, &len_after));
    CHECK_EQ_U(len_after, len_before);
    CHECK_ERR(tr_tensor_add_(a, (tr_tensor){0}), TR_ERR_INVALID_HANDLE, "invalid tensor handle");
    CHECK_OK(tr_scope_dispose(s));
}

/* ------------------------------------------------------------------ autograd */

static void grad_returns_a_new_handle(void) {
    const float xv[3] = {1, -2, 3};
    const int64_t shape[1] = {3};
    tr_tensor x = {0}, sq = {0}, y = {0}, g1 = {0}, g2 = {0}, none = {42}, d = {0};
    tr_scope s = {0};
    size_t live, len = 0;
    bool rg = true;
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(f32_tensor(xv, shape, 1, &x));
    CHECK_OK(tr_tensor_requires_grad(x, &rg));
    CHECK(!rg);
    CHECK_OK(tr_tensor_requires_grad_(x, true));
    CHECK_OK(tr_tensor_requires_grad(x, &rg));
    CHECK(rg);
    live = tr_live_handles();
    CHECK_OK(tr_tensor_grad(x, &none)); /* none before any backward: handle 0, nothing new */
    CHECK_EQ_U(none.id, 0);
    CHECK_EQ_U(tr_live_handles(), live);
    /* y = sum(x^2) -> dy/dx = 2x */
    REQUIRE_OK(tr_tensor_mul(x, x, &sq));
    REQUIRE_OK(tr_tensor_sum(sq, &y));
    live = tr_live_handles();
    CHECK_OK(tr_tensor_backward(y));
    CHECK_EQ_U(tr_live_handles(), live);
    CHECK_OK(tr_tensor_grad(x, &g1));
    CHECK_OK(tr_tensor_grad(x, &g2));
    CHECK(g1.id != 0 && g2.id != 0 && g1.id != g2.id); /* each read is its own handle */
    CHECK_EQ_U(tr_live_handles(), live + 2);
    CHECK_EQ_U(tu_owner(g1), s.id);
    CHECK_F32(g1, 0, 2, -4, 6);
    CHECK_OK(tr_tensor_release(g1));
    CHECK(tu_valid(g2) == 1);
    /* zero_grad zeroes the gradient in place (g2 shares its storage) */
    CHECK_OK(tr_tensor_zero_grad(x));
    CHECK_OK(tr_tensor_grad(x, &g1));
    CHECK_F32(g1, 0, 0, 0, 0);
    /* clear_grad drops it: none to read (g1 and g2 still read their storage) */
    CHECK_OK(tr_tensor_clear_grad(x));
    CHECK_OK(tr_tensor_grad(x, &none));
    CHECK_EQ_U(none.id, 0);
    CHECK_F32(g1, 0, 0, 0, 0);
    CHECK_OK(tr_tensor_clear_grad(x)); /* none to drop */
    /* detach: same data, no gradient tracking */
    CHECK_OK(tr_tensor_detach(x, &d));
    CHECK_OK(tr_tensor_requires_grad(d, &rg));
    CHECK(!rg);
    CHECK_F32(d, 0, 1, -2, 3);
    CHECK_OK(tr_scope_len(s, &len));
    CHECK_EQ_U(len, 6); /* x, sq, y, g2, the second g1 and d; the released g1 left */
    CHECK_OK(tr_scope_dispose(s));
}

static void grad_set_enabled_is_a_manual_guard(void) {
    const float xv[2] = {1, 2};
    const int64_t shape[1] = {2};
    tr_tensor x = {0}, y = {0};
    tr_scope s = {0};
    bool prev = false, rg = true;
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(f32_tensor(xv, shape, 1, &x));
    CHECK_OK(tr_tensor_requires_grad_(x, true));
    CHECK_OK(tr_grad_set_enabled(false, &prev));
    CHECK(prev); /* enabled by default */
    CHECK_OK(tr_tensor_mul_scalar(x, tr_scalar_float(3), &y));
    CHECK_OK(tr_tensor_requires_grad(y, &rg));
    CHECK(!rg);
    CHECK_OK(tr_grad_set_enabled(true, &prev));
    CHECK(!prev);
    CHECK_OK(tr_tensor_mul_scalar(x, tr_scalar_float(3), &y));
    CHECK_OK(tr_tensor_requires_grad(y, &rg));
    CHECK(rg);
    CHECK_OK(tr_grad_set_enabled(true, NULL)); /* out_previous may be NULL */
    CHECK_OK(tr_scope_dispose(s));
}

/* ------------------------------------------------------------------ optimizers */

static void sgd_and_adam_steps(void) {
    const float pv[2] = {1, -1};
    const int64_t shape[1] = {2};
    tr_tensor p = {0}, q = {0}, y = {0}, m = {0}, v = {0}, t = {0}, nograd = {0};
    tr_scope s = {0};
    size_t live;
    REQUIRE_OK(tr_scope_new(&s));
    /* SGD: loss = sum(3p) -> grad 3; p -= 0.1 * 3 */
    REQUIRE_OK(f32_tensor(pv, shape, 1, &p));
    CHECK_OK(tr_tensor_requires_grad_(p, true));
    REQUIRE_OK(tr_tensor_mul_scalar(p, tr_scalar_float(3), &t));
    REQUIRE_OK(tr_tensor_sum(t, &y));
    CHECK_OK(tr_tensor_backward(y));
    REQUIRE_OK(f32_tensor(pv, shape, 1, &nograd)); /* no gradient: skipped */
    {
        tr_tensor params[2];
        params[0] = p;
        params[1] = nograd;
        live = tr_live_handles();
        CHECK_OK(tr_optim_sgd_step(params, 2, 0.1));
        CHECK_EQ_U(tr_live_handles(), live);
    }
    CHECK_F32(p, 1e-6, 0.7f, -1.3f);
    CHECK_F32(nograd, 0, 1, -1);
    /* Adam, first step: the update is lr * sign(grad) (bias-corrected m / sqrt(v)) */
    REQUIRE_OK(f32_tensor(pv, shape, 1, &q));
    CHECK_OK(tr_tensor_requires_grad_(q, true));
    REQUIRE_OK(tr_tensor_mul_scalar(q, tr_scalar_float(-2), &t));
    REQUIRE_OK(tr_tensor_sum(t, &y));
    CHECK_OK(tr_tensor_backward(y));
    REQUIRE_OK(tr_tensor_zeros_like(q, &m));
    REQUIRE_OK(tr_tensor_zeros_like(q, &v));
    live = tr_live_handles();
    CHECK_OK(tr_optim_adam_step(&q, 1, &m, 1, &v, 1, 1, 0.1, 0.9, 0.999, 1e-8, 0));
    CHECK_EQ_U(tr_live_handles(), live);
    CHECK_F32(q, 1e-5, 1.1f, -0.9f);
    CHECK_F32(m, 1e-6, -0.2f, -0.2f);
    CHECK_F32(v, 1e-7, 0.004f, 0.004f);
    CHECK_ERR(tr_optim_adam_step(&q, 1, &m, 1, &v, 1, 0, 0.1, 0.9, 0.999, 1e-8, 0),
              TR_ERR_INVALID_ARG, "step");
    CHECK_ERR(tr_optim_adam_step(&q, 1, &m, 1, &v, 0, 2, 0.1, 0.9, 0.999, 1e-8, 0),
              TR_ERR_INVALID_ARG, "exp_avg_sq");
    CHECK_OK(tr_scope_dispose(s));
}

/* Losses of a seeded 8-32-1 MLP (dropout on the hidden layer) over 5 SGD steps, all in one
 * scope; returns the number of failed calls (0 when every call succeeded). */
enum { TRAIN_STEPS = 5 };

static int train_mlp(double losses[TRAIN_STEPS]) {
    const int64_t xs[2] = {64, 8}, w1s[2] = {8, 32}, b1s[1] = {32}, w2s[2] = {32, 1};
    tr_tensor x = {0}, y = {0}, t = {0}, h = {0}, loss = {0}, params[3] = {{0}, {0}, {0}};
    tr_scope s = {0};
    int failed = 0, i, step;
#define STEP(call) (failed += (call) != TR_OK)
    STEP(tr_scope_new(&s));
    STEP(tr_manual_seed(3));
    STEP(tr_tensor_randn(xs, 2, TR_DTYPE_F32, &x));
    STEP(tr_tensor_narrow(x, 1, 0, 1, &t));
    STEP(tr_tensor_tanh(t, &y));
    STEP(tr_tensor_randn(w1s, 2, TR_DTYPE_F32, &t));
    STEP(tr_tensor_mul_scalar(t, tr_scalar_float(0.35), &params[0]));
    STEP(tr_tensor_zeros(b1s, 1, TR_DTYPE_F32, &params[1]));
    STEP(tr_tensor_randn(w2s, 2, TR_DTYPE_F32, &t));
    STEP(tr_tensor_mul_scalar(t, tr_scalar_float(0.18), &params[2]));
    for (i = 0; i < 3; i++) STEP(tr_tensor_requires_grad_(params[i], true));
    for (step = 0; step < TRAIN_STEPS; step++) {
        STEP(tr_tensor_matmul(x, params[0], &t));
        STEP(tr_tensor_add(t, params[1], &h));
        STEP(tr_tensor_relu(h, &t));
        STEP(tr_tensor_dropout(t, 0.2, true, &h));
        STEP(tr_tensor_matmul(h, params[2], &t));
        STEP(tr_tensor_mse_loss(t, y, &loss));
        STEP(tr_tensor_backward(loss));
        STEP(tr_tensor_item(loss, &losses[step]));
        STEP(tr_optim_sgd_step(params, 3, 0.1));
        for (i = 0; i < 3; i++) STEP(tr_tensor_zero_grad(params[i]));
    }
    STEP(tr_scope_dispose(s));
#undef STEP
    return failed;
}

/* Training through the manager gives, under every policy, the losses of training without it. */
/* Every policy, with recomputation off and always (results dropped when evicted, made again). */
static void training_under_every_policy(void) {
    const tr_policy policies[3] = {TR_POLICY_RESIDENT, TR_POLICY_GENOA, TR_POLICY_FLOW};
    const tr_recompute modes[2] = {TR_RECOMPUTE_OFF, TR_RECOMPUTE_ALWAYS};
    double plain[TRAIN_STEPS], managed[TRAIN_STEPS];
    tr_residency_config config;
    tr_residency_stats stats;
    tr_device_memory memory;
    int p, r, i;
    CHECK(train_mlp(plain) == 0);
    CHECK(plain[TRAIN_STEPS - 1] < plain[0]);
    for (p = 0; p < 3; p++) for (r = 0; r < 2; r++) {
        REQUIRE_OK(tr_residency_config_default(&config));
        CHECK(config.recompute == TR_RECOMPUTE_OFF);
        config.policy = policies[p];
        config.recompute = modes[r];
        /* The largest op: an 8 KiB activation in, 8 KiB out; backward's largest node holds an
         * 8 KiB saved tensor, the 8 KiB gradient it receives and the 8 KiB it makes, and more
         * while it makes a dropped input again. */
        config.budget_bytes = 40 << 10;
        REQUIRE_OK(tr_residency_configure(&config));
        CHECK(tr_residency_saved_tensors_managed()); /* no Python engine in this process */
        CHECK_OK(tr_residency_device_memory(true, &memory));
        CHECK(train_mlp(managed) == 0);
        CHECK_OK(tr_residency_stats_get(&stats));
        CHECK_OK(tr_residency_device_memory(false, &memory));
        CHECK_OK(tr_residency_disable());
        CHECK(!tr_residency_saved_tensors_managed());
        for (i = 0; i < TRAIN_STEPS; i++) CHECK(managed[i] == plain[i]);
        if (policies[p] != TR_POLICY_RESIDENT) {
            CHECK(stats.peak_device_bytes <= config.budget_bytes);
            CHECK(memory.peak <= config.budget_bytes); /* as the simulated device's allocator counts */
            CHECK(stats.evictions > 0);
        }
        if (policies[p] != TR_POLICY_RESIDENT && modes[r] == TR_RECOMPUTE_ALWAYS) CHECK(stats.drops > 0 && stats.recomputations > 0);
        if (modes[r] == TR_RECOMPUTE_OFF) CHECK(stats.drops == 0 && stats.recomputations == 0);
        CHECK(stats.reserved_bytes == 0); /* CUDA only */
    }
}

/* The schedule model of the last logged iteration (five training steps between two marks): it
 * moved what the counters say it moved, and takes at least its bound and the same iteration
 * with everything resident. */
static void schedule_model_of_the_last_marked_iteration(void) {
    double losses[TRAIN_STEPS];
    tr_residency_config config;
    tr_residency_stats before, after;
    tr_schedule_model model;
    CHECK_ERR(tr_residency_schedule_model(4, &model), TR_ERR_INVALID_ARG, "no residency manager");
    REQUIRE_OK(tr_residency_config_default(&config));
    config.policy = TR_POLICY_FLOW;
    config.budget_bytes = 40 << 10;
    REQUIRE_OK(tr_residency_configure(&config));
    CHECK_OK(tr_residency_schedule_log_start());
    CHECK_ERR(tr_residency_schedule_model(4, &model), TR_ERR_INVALID_ARG, "no iteration was logged");
    CHECK(train_mlp(losses) == 0);
    CHECK_OK(tr_residency_mark_iteration());
    CHECK_OK(tr_residency_stats_get(&before));
    CHECK(train_mlp(losses) == 0);
    CHECK_OK(tr_residency_mark_iteration());
    CHECK_OK(tr_residency_stats_get(&after));
    CHECK_ERR(tr_residency_schedule_model(3, &model), TR_ERR_INVALID_ARG, "element_bytes is 3");
    CHECK_ERR(tr_residency_schedule_model(4, NULL), TR_ERR_NULL_ARG, "out");
    CHECK_OK(tr_residency_schedule_model(4, &model));
    CHECK(model.loaded_bytes > 0 && model.loaded_bytes == after.load_bytes - before.load_bytes);
    CHECK(model.written_bytes == after.write_back_bytes - before.write_back_bytes);
    CHECK(model.unmanaged_s > 0 && model.step_s >= model.unmanaged_s && model.step_s >= model.bound_s * (1 - 1e-9));
    CHECK_OK(tr_residency_disable());
}

/* The saved-tensor functions a host's own autograd engine calls (PyTorch's, from Python; its
 * tests are in bindings/python/tests/test_training.py): their arguments are checked. */
static void saved_tensor_functions_check_their_arguments(void) {
    void *token = NULL, *managed = NULL;
    CHECK(tr_saved_pack(NULL, &token) == TR_ERR_NULL_ARG);
    CHECK(tr_saved_pack(&token, NULL) == TR_ERR_NULL_ARG);
    CHECK(tr_saved_unpack(NULL, &managed) == TR_ERR_NULL_ARG);
    CHECK(token == NULL && managed == NULL); /* outputs are written only on success */
    CHECK_OK(tr_saved_free(NULL));
    /* A C program has no PyTorch hooks on its stack to adopt, and none to give back. */
    CHECK(tr_saved_hooks_adopt() == TR_ERR_TORCH);
    CHECK(strstr(tu_last_error(), "no saved-tensor hooks") != NULL);
    CHECK_OK(tr_saved_hooks_return());
}

/* ------------------------------------------------------------------ process exit */

/* What a garbage collector does at exit: calls after main returned, from an atexit handler
 * (the main thread's thread-locals are gone by then). Runs in a child process; the handler
 * reports each failed expectation as a bit of the exit code. */
enum { EXIT_RELEASE = 1, EXIT_NOT_STALE = 2, EXIT_SCOPED = 4, EXIT_LIVE = 8, EXIT_SCOPE_NEW = 16 };
static tr_tensor exit_held, exit_scoped;

static void release_at_exit(void) {
    int bits = 0;
    tr_status st;
    tr_scope s = {0};
    if (tr_tensor_release(exit_held) != TR_OK || tr_tensor_release(exit_held) != TR_OK) bits |= EXIT_RELEASE;
    if (tr_tensor_release(exit_held) != TR_ERR_STALE_HANDLE) bits |= EXIT_NOT_STALE;
    /* Its scope was left open; it may already have been disposed with the thread's state. */
    st = tr_tensor_release(exit_scoped);
    if (st != TR_OK && st != TR_ERR_STALE_HANDLE) bits |= EXIT_SCOPED;
    if (tr_live_handles() != 0) bits |= EXIT_LIVE;
    st = tr_scope_new(&s);
    if (st == TR_ERR_PANIC) bits |= EXIT_SCOPE_NEW;
    if (st == TR_OK) tr_scope_dispose(s);
    fflush(stdout);
    _exit(bits);
}

static void calls_at_process_exit(void) {
    const int64_t shape[1] = {3};
    int status = 0, code;
    pid_t pid;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
        tr_scope s = {0};
        if (tr_tensor_ones(shape, 1, TR_DTYPE_F32, &exit_held) != TR_OK) _exit(100);
        if (tr_tensor_retain(exit_held) != TR_OK) _exit(101);
        if (tr_scope_new(&s) != TR_OK) _exit(102);
        if (tr_tensor_ones(shape, 1, TR_DTYPE_F32, &exit_scoped) != TR_OK) _exit(103);
        if (atexit(release_at_exit) != 0) _exit(104);
        exit(0);
    }
    CHECK(pid > 0);
    if (pid <= 0) return;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    if (!WIFEXITED(status)) return;
    code = WEXITSTATUS(status);
    CHECK(code < 100); /* the child set up its handles */
    if (code >= 100) return;
    CHECK(!(code & EXIT_RELEASE));   /* releases at exit work */
    CHECK(!(code & EXIT_NOT_STALE)); /* and a third release is still TR_ERR_STALE_HANDLE */
    CHECK(!(code & EXIT_SCOPED));
    CHECK(!(code & EXIT_LIVE));      /* nothing left alive */
    CHECK(!(code & EXIT_SCOPE_NEW)); /* tr_scope_new at exit returns a status, not a panic */
}

int main(void) {
    RUN(versions_match_header);
    RUN(retain_needs_one_release_each);
    RUN(alias_shares_storage_with_own_life);
    RUN(live_bytes_follow_handles);
    RUN(from_data_copy_to_every_dtype);
    RUN(copy_to_of_a_transposed_view);
    RUN(unaligned_buffers_and_empty_tensors);
    RUN(creation_ops);
    RUN(elementwise_ops);
    RUN(reductions_with_dim_and_keepdim);
    RUN(matmul_bmm_linear);
    RUN(shape_ops);
    RUN(cat_and_stack);
    RUN(scalars_keep_their_type);
    RUN(nn_ops);
    RUN(in_place_ops_register_nothing);
    RUN(grad_returns_a_new_handle);
    RUN(grad_set_enabled_is_a_manual_guard);
    RUN(sgd_and_adam_steps);
    RUN(training_under_every_policy);
    RUN(schedule_model_of_the_last_marked_iteration);
    RUN(saved_tensor_functions_check_their_arguments);
    RUN(calls_at_process_exit);
    return tu_finish();
}

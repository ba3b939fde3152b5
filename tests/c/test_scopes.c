/*
 * Dispose scopes through the C ABI, against docs/dispose-scopes.md.
 *
 * fact01..fact14 are the spec's numbered statistics facts, one function each, comparing the
 * tuple (created_outside, disposed_outside, created_in, disposed_in, attached, detached, live)
 * after tr_scope_stats_reset(). The rest covers the operations table: out-of-order dispose,
 * dispose_everything(_but), moves (into a disposed scope, to its own scope), queries, and
 * scopes with retained or aliased handles. Every test must leave no handle and no scope behind.
 */
#include "test_util.h"

/* ------------------------------------------------------------------ the numbered facts */

/* 1. Create in a scope -> (0,0,1,0,0,0,1). Attach it to the scope it is already in -> unchanged. */
static void fact01_create_in_scope_then_attach_to_own_scope(void) {
    tr_scope s = {0};
    tr_tensor t = {0};
    size_t len = 0;
    bool in = false;
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tu_new(&t));
    CHECK_STATS(0, 0, 1, 0, 0, 0, 1);
    CHECK_EQ_U(tu_owner(t), s.id);
    CHECK_OK(tr_scope_attach(s, t));
    CHECK_STATS(0, 0, 1, 0, 0, 0, 1);
    CHECK_OK(tr_scope_len(s, &len));
    CHECK_EQ_U(len, 1); /* attaching twice must not list it twice */
    CHECK_OK(tr_scope_contains(s, t, &in));
    CHECK(in);
    CHECK_OK(tr_scope_dispose(s));
    CHECK(tu_valid(t) == 0);
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
}

/* 2. ...then detach -> (0,0,1,0,0,1,1); then dispose the scope -> unchanged, the handle is alive. */
static void fact02_detach_then_dispose_scope_keeps_handle(void) {
    tr_scope s = {0};
    tr_tensor t = {0};
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tu_new(&t));
    CHECK_OK(tr_scope_attach(s, t));
    CHECK_OK(tr_scope_detach(s, t));
    CHECK_STATS(0, 0, 1, 0, 0, 1, 1);
    CHECK_EQ_U(tu_owner(t), 0);
    CHECK_OK(tr_scope_dispose(s));
    CHECK_STATS(0, 0, 1, 0, 0, 1, 1);
    CHECK(tu_valid(t) == 1);
    CHECK_OK(tr_tensor_release(t));
    CHECK(tu_valid(t) == 0);
}

/* 3. Create in a scope, dispose the handle -> (0,0,1,1,0,0,0); a second dispose changes nothing. */
static void fact03_dispose_handle_in_scope_twice(void) {
    tr_scope s = {0};
    tr_tensor t = {0};
    size_t len = 9;
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tu_new(&t));
    CHECK_OK(tr_tensor_release(t));
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
    CHECK_OK(tr_scope_len(s, &len));
    CHECK_EQ_U(len, 0); /* the dead handle left its scope */
    CHECK_ERR(tr_tensor_release(t), TR_ERR_STALE_HANDLE, "stale");
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
    CHECK_OK(tr_scope_dispose(s));
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
}

/* 4. Create in a scope, dispose the scope -> (0,0,1,1,0,0,0). */
static void fact04_dispose_scope_disposes_handle(void) {
    tr_scope s = {0};
    tr_tensor t = {0};
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tu_new(&t));
    CHECK_OK(tr_scope_dispose(s));
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
    CHECK(tu_valid(t) == 0);
    CHECK_ERR(tr_tensor_release(t), TR_ERR_STALE_HANDLE, "stale");
    CHECK_OK(tr_scope_dispose(s)); /* a second dispose is a no-op */
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
}

/* 5. Create outside -> (1,0,0,0,0,0,1); dispose -> (1,1,0,0,0,0,0). */
static void fact05_create_and_dispose_outside(void) {
    tr_tensor t = {0};
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tu_new(&t));
    CHECK_STATS(1, 0, 0, 0, 0, 0, 1);
    CHECK_EQ_U(tu_owner(t), 0);
    CHECK_OK(tr_tensor_release(t));
    CHECK_STATS(1, 1, 0, 0, 0, 0, 0);
}

/* 6. Create outside, attach -> (1,0,0,0,1,0,1); then dispose the handle, or the scope ->
 *    (1,0,0,1,1,0,0). */
static void fact06_attach_then_dispose_handle_or_scope(void) {
    int variant;
    for (variant = 0; variant < 2; variant++) {
        tr_scope s = {0};
        tr_tensor t = {0};
        CHECK_OK(tr_scope_stats_reset());
        REQUIRE_OK(tu_new(&t));
        REQUIRE_OK(tr_scope_new(&s));
        CHECK_OK(tr_scope_attach(s, t));
        CHECK_STATS(1, 0, 0, 0, 1, 0, 1);
        CHECK_EQ_U(tu_owner(t), s.id);
        if (variant == 0) {
            CHECK_OK(tr_tensor_release(t));
            CHECK_STATS(1, 0, 0, 1, 1, 0, 0);
            CHECK_OK(tr_scope_dispose(s));
        } else {
            CHECK_OK(tr_scope_dispose(s));
            CHECK(tu_valid(t) == 0);
        }
        CHECK_STATS(1, 0, 0, 1, 1, 0, 0);
    }
}

/* 7. Create outside, attach, detach -> (1,0,0,0,1,1,1); disposing the scope afterwards changes
 *    nothing. */
static void fact07_attach_detach_then_dispose_scope(void) {
    tr_scope s = {0};
    tr_tensor t = {0};
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tu_new(&t));
    REQUIRE_OK(tr_scope_new(&s));
    CHECK_OK(tr_scope_attach(s, t));
    CHECK_OK(tr_tensor_detach_from_scope(t));
    CHECK_STATS(1, 0, 0, 0, 1, 1, 1);
    CHECK_OK(tr_scope_dispose(s));
    CHECK_STATS(1, 0, 0, 0, 1, 1, 1);
    CHECK(tu_valid(t) == 1);
    CHECK_OK(tr_tensor_release(t));
    CHECK_STATS(1, 1, 0, 0, 1, 1, 0);
}

/* 8. Detaching a handle that no scope owns changes nothing. */
static void fact08_detach_unowned_changes_nothing(void) {
    tr_scope s = {0};
    tr_tensor t = {0};
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tu_new(&t));
    CHECK_OK(tr_tensor_detach_from_scope(t));
    CHECK_STATS(1, 0, 0, 0, 0, 0, 1);
    REQUIRE_OK(tr_scope_new(&s));
    CHECK_OK(tr_scope_detach(s, t)); /* the open scope does not own it either */
    CHECK_OK(tr_tensor_detach_from_scope(t));
    CHECK_STATS(1, 0, 0, 0, 0, 0, 1);
    CHECK_EQ_U(tu_owner(t), 0);
    CHECK_OK(tr_scope_dispose(s));
    CHECK(tu_valid(t) == 1);
    CHECK_OK(tr_tensor_release(t));
}

/* 9. Attach to scope A, open and dispose an unrelated scope B -> unchanged; A still owns it. */
static void fact09_unrelated_scope_leaves_attachment(void) {
    tr_scope a = {0}, b = {0};
    tr_tensor t = {0};
    bool in = false;
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tu_new(&t));
    REQUIRE_OK(tr_scope_new(&a));
    CHECK_OK(tr_scope_attach(a, t));
    REQUIRE_OK(tr_scope_new(&b));
    CHECK_OK(tr_scope_dispose(b));
    CHECK_STATS(1, 0, 0, 0, 1, 0, 1);
    CHECK_OK(tr_scope_contains(a, t, &in));
    CHECK(in);
    CHECK_EQ_U(tu_owner(t), a.id);
    CHECK(tu_valid(t) == 1);
    CHECK_OK(tr_scope_dispose(a));
    CHECK(tu_valid(t) == 0);
    CHECK_STATS(1, 0, 0, 1, 1, 0, 0);
}

/* 10. Four handles in one scope: one kept, one detached, one moved out of the outermost scope,
 *     one disposed by hand. After the scope: live = 2, created_in = 4, disposed_in = 2,
 *     detached = 2. */
static void fact10_four_handles_four_fates(void) {
    tr_scope s = {0};
    tr_tensor kept = {0}, detached = {0}, moved = {0}, disposed = {0};
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tu_new(&kept));
    REQUIRE_OK(tu_new(&detached));
    REQUIRE_OK(tu_new(&moved));
    REQUIRE_OK(tu_new(&disposed));
    CHECK_OK(tr_tensor_detach_from_scope(detached));
    CHECK_OK(tr_tensor_move_to_outer_scope(moved)); /* no outer scope: it becomes detached */
    CHECK_EQ_U(tu_owner(moved), 0);
    CHECK_OK(tr_tensor_release(disposed));
    CHECK_OK(tr_scope_dispose(s));
    CHECK_STATS(0, 0, 4, 2, 0, 2, 2);
    CHECK(tu_valid(kept) == 0);
    CHECK(tu_valid(disposed) == 0);
    CHECK(tu_valid(detached) == 1);
    CHECK(tu_valid(moved) == 1);
    CHECK_OK(tr_tensor_release(detached));
    CHECK_OK(tr_tensor_release(moved));
    CHECK_STATS(0, 2, 4, 2, 0, 2, 0);
}

/* 11. Temporaries of an expression on a tensor made outside the scope are all owned by the scope
 *     and all dead after it; the outside tensor is untouched. */
static void fact11_expression_temporaries_die_with_scope(void) {
    const float xs[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float back[4] = {0};
    size_t written = 0, len = 0;
    tr_tensor x = {0}, tmp[4] = {{0}, {0}, {0}, {0}};
    tr_scope s = {0};
    double sum = 0;
    int i;
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tu_f32(xs, 4, &x));
    REQUIRE_OK(tr_scope_new(&s));
    /* sum(exp(x * 0.5 + 1)) */
    CHECK_OK(tr_tensor_mul_scalar(x, tr_scalar_float(0.5), &tmp[0]));
    CHECK_OK(tr_tensor_add_scalar(tmp[0], tr_scalar_float(1.0), &tmp[1]));
    CHECK_OK(tr_tensor_exp(tmp[1], &tmp[2]));
    CHECK_OK(tr_tensor_sum(tmp[2], &tmp[3]));
    CHECK_OK(tr_tensor_item(tmp[3], &sum));
    CHECK_NEAR(sum, 44.1387760531 /* e^1.5 + e^2 + e^2.5 + e^3 */, 1e-3);
    CHECK_OK(tr_scope_len(s, &len));
    CHECK_EQ_U(len, 4);
    for (i = 0; i < 4; i++) CHECK_EQ_U(tu_owner(tmp[i]), s.id);
    CHECK_EQ_U(tu_owner(x), 0);
    CHECK_STATS(1, 0, 4, 0, 0, 0, 5);
    CHECK_OK(tr_scope_dispose(s));
    for (i = 0; i < 4; i++) CHECK(tu_valid(tmp[i]) == 0);
    CHECK_STATS(1, 0, 4, 4, 0, 0, 1);
    CHECK(tu_valid(x) == 1);
    CHECK_OK(tr_tensor_copy_to(x, (uint8_t *)back, sizeof back, &written));
    CHECK_EQ_U(written, sizeof back);
    CHECK(memcmp(xs, back, sizeof back) == 0);
    CHECK_OK(tr_tensor_release(x));
}

/* 12. After an inner scope ends, `live` equals its value before the inner scope opened; after
 *     the outer scope, 0. */
static void fact12_inner_scope_restores_live(void) {
    tr_scope outer = {0}, inner = {0}, cur = {0};
    tr_tensor t = {0};
    tr_stats before, after;
    int i;
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tr_scope_new(&outer));
    for (i = 0; i < 3; i++) CHECK_OK(tu_new(&t));
    CHECK_OK(tr_scope_stats_get(&before));
    CHECK(before.live == 3);
    REQUIRE_OK(tr_scope_new(&inner));
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, inner.id);
    for (i = 0; i < 5; i++) CHECK_OK(tu_new(&t));
    CHECK_EQ_U(tu_owner(t), inner.id);
    CHECK_OK(tr_scope_dispose(inner));
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, outer.id);
    CHECK_OK(tr_scope_stats_get(&after));
    CHECK(after.live == before.live);
    CHECK_OK(tr_scope_dispose(outer));
    CHECK_STATS(0, 0, 8, 8, 0, 0, 0);
}

/* 13. A full training loop (two-layer MLP, MSE loss, ten SGD steps reading `grad`) inside one
 *     scope, with the parameters created inside it, ends with live = 0. */
static void fact13_mlp_training_loop_in_one_scope(void) {
    enum { N = 32, IN = 4, HID = 16 };
    float xs[N * IN], ys[N];
    const int64_t xshape[2] = {N, IN}, yshape[2] = {N, 1};
    const int64_t w1shape[2] = {HID, IN}, b1shape[1] = {HID}, w2shape[2] = {1, HID}, b2shape[1] = {1};
    tr_scope s = {0};
    tr_tensor x = {0}, y = {0}, params[4] = {{0}, {0}, {0}, {0}};
    tr_tensor b1init = {0}, b2init = {0};
    double first_loss = 0, last_loss = 0;
    size_t live_before = tr_live_handles();
    int i, step;

    for (i = 0; i < N; i++) {
        int j;
        float target = 0;
        for (j = 0; j < IN; j++) {
            xs[i * IN + j] = (float)((i * 7 + j * 3) % 11) / 11.0f - 0.5f;
            target += (float)(j + 1) * xs[i * IN + j];
        }
        ys[i] = target;
    }
    CHECK_OK(tr_scope_stats_reset());
    CHECK_OK(tr_manual_seed(13));
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tr_tensor_from_data((const uint8_t *)xs, sizeof xs, xshape, 2, TR_DTYPE_F32, &x));
    REQUIRE_OK(tr_tensor_from_data((const uint8_t *)ys, sizeof ys, yshape, 2, TR_DTYPE_F32, &y));
    /* Parameters: small random weights, zero biases, all created inside the scope. */
    REQUIRE_OK(tr_tensor_randn(w1shape, 2, TR_DTYPE_F32, &b1init));
    REQUIRE_OK(tr_tensor_mul_scalar(b1init, tr_scalar_float(0.3), &params[0]));
    REQUIRE_OK(tr_tensor_zeros(b1shape, 1, TR_DTYPE_F32, &params[1]));
    REQUIRE_OK(tr_tensor_randn(w2shape, 2, TR_DTYPE_F32, &b2init));
    REQUIRE_OK(tr_tensor_mul_scalar(b2init, tr_scalar_float(0.3), &params[2]));
    REQUIRE_OK(tr_tensor_zeros(b2shape, 1, TR_DTYPE_F32, &params[3]));
    for (i = 0; i < 4; i++) {
        bool rg = false;
        CHECK_OK(tr_tensor_requires_grad_(params[i], true));
        CHECK_OK(tr_tensor_requires_grad(params[i], &rg));
        CHECK(rg);
    }

    for (step = 0; step < 10; step++) {
        tr_tensor h = {0}, a = {0}, pred = {0}, loss = {0};
        size_t len_before = 0, len_after = 0;
        double value = 0;
        REQUIRE_OK(tr_tensor_linear(x, params[0], params[1], &h));
        REQUIRE_OK(tr_tensor_relu(h, &a));
        REQUIRE_OK(tr_tensor_linear(a, params[2], params[3], &pred));
        REQUIRE_OK(tr_tensor_mse_loss(pred, y, &loss));
        REQUIRE_OK(tr_tensor_item(loss, &value));
        if (step == 0) first_loss = value;
        last_loss = value;
        CHECK_OK(tr_scope_len(s, &len_before));
        REQUIRE_OK(tr_tensor_backward(loss));
        CHECK_OK(tr_scope_len(s, &len_after));
        CHECK_EQ_U(len_after, len_before); /* backward registers nothing */
        for (i = 0; i < 4; i++) {
            tr_tensor g = {0};
            size_t n_param = 0, n_grad = 0;
            CHECK_OK(tr_tensor_grad(params[i], &g));
            CHECK(g.id != 0);
            CHECK_EQ_U(tu_owner(g), s.id); /* a gradient read is a new handle in the scope */
            CHECK_OK(tr_tensor_numel(params[i], &n_param));
            CHECK_OK(tr_tensor_numel(g, &n_grad));
            CHECK_EQ_U(n_grad, n_param);
        }
        CHECK_OK(tr_scope_len(s, &len_before));
        REQUIRE_OK(tr_optim_sgd_step(params, 4, 0.1));
        for (i = 0; i < 4; i++) CHECK_OK(tr_tensor_zero_grad(params[i]));
        CHECK_OK(tr_scope_len(s, &len_after));
        CHECK_EQ_U(len_after, len_before); /* optim_sgd_step and zero_grad register nothing */
    }
    CHECK(last_loss < first_loss * 0.8);
    CHECK(tr_live_handles() > live_before);
    CHECK_OK(tr_scope_dispose(s));
    CHECK_EQ_U(tr_live_handles(), live_before);
    for (i = 0; i < 4; i++) CHECK(tu_valid(params[i]) == 0);
    {
        tr_stats st;
        CHECK_OK(tr_scope_stats_get(&st));
        CHECK(st.live == 0);
        CHECK(st.created_in_scope > 0 && st.created_in_scope == st.disposed_in_scope);
        CHECK(st.created_outside_scope == 0);
    }
}

/* 14. Moving a handle to the scope of another handle that no scope owns detaches it; moving a
 *     handle from the third nested scope to the first makes it survive the third and second and
 *     die with the first. */
static void fact14_move_to_scope_of_unowned_and_across_nesting(void) {
    tr_scope s1 = {0}, s2 = {0}, s3 = {0}, none = {UINT64_MAX};
    tr_tensor free_t = {0}, t = {0}, u = {0};
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tu_new(&free_t));
    REQUIRE_OK(tr_scope_new(&s1));
    REQUIRE_OK(tu_new(&t));
    CHECK_STATS(1, 0, 1, 0, 0, 0, 2);
    CHECK_OK(tr_tensor_scope(free_t, &none));
    CHECK_EQ_U(none.id, 0);
    CHECK_OK(tr_tensor_move_to_scope(t, none));
    CHECK_EQ_U(tu_owner(t), 0);
    CHECK_STATS(1, 0, 1, 0, 0, 1, 2);
    CHECK_OK(tr_tensor_release(t));
    CHECK_OK(tr_tensor_release(free_t));

    REQUIRE_OK(tr_scope_new(&s2));
    REQUIRE_OK(tr_scope_new(&s3));
    REQUIRE_OK(tu_new(&u));
    CHECK_OK(tr_scope_stats_reset());
    CHECK_OK(tr_tensor_move_to_scope(u, s1));
    CHECK_STATS(0, 0, 0, 0, 0, 0, 0); /* moves between scopes change no counter */
    CHECK_EQ_U(tu_owner(u), s1.id);
    CHECK_OK(tr_scope_dispose(s3));
    CHECK(tu_valid(u) == 1);
    CHECK_OK(tr_scope_dispose(s2));
    CHECK(tu_valid(u) == 1);
    CHECK_OK(tr_scope_dispose(s1));
    CHECK(tu_valid(u) == 0);
    CHECK_STATS(0, 0, 0, 1, 0, 0, -1);
}

/* ------------------------------------------------------------------ the operations table */

/* Out of order: disposing an outer scope while an inner one is open drops the outer's handles,
 * keeps the current scope, new handles go to the current scope, and move_to_outer_scope from the
 * inner one reaches the nearest live outer scope. */
static void out_of_order_dispose_relinks_inner_scope(void) {
    tr_scope s0 = {0}, s1 = {0}, s2 = {0}, cur = {0};
    tr_tensor in_s1 = {0}, in_s2 = {0}, later = {0};
    size_t len = 9;
    REQUIRE_OK(tr_scope_new(&s0));
    REQUIRE_OK(tr_scope_new(&s1));
    REQUIRE_OK(tu_new(&in_s1));
    REQUIRE_OK(tr_scope_new(&s2));
    REQUIRE_OK(tu_new(&in_s2));

    CHECK_OK(tr_scope_dispose(s1)); /* not the innermost */
    CHECK(tu_valid(in_s1) == 0);
    CHECK(tu_valid(in_s2) == 1);
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, s2.id);
    CHECK_ERR(tr_scope_len(s1, &len), TR_ERR_SCOPE_DISPOSED, "disposed");

    REQUIRE_OK(tu_new(&later));
    CHECK_EQ_U(tu_owner(later), s2.id);
    CHECK_OK(tr_tensor_move_to_outer_scope(later));
    CHECK_EQ_U(tu_owner(later), s0.id); /* s1 is gone: the nearest live outer is s0 */
    CHECK_OK(tr_scope_move_to_outer(s2, in_s2));
    CHECK_EQ_U(tu_owner(in_s2), s0.id);

    CHECK_OK(tr_scope_dispose(s2));
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, s0.id);
    CHECK(tu_valid(later) == 1);
    CHECK(tu_valid(in_s2) == 1);
    CHECK_OK(tr_scope_len(s0, &len));
    CHECK_EQ_U(len, 2);
    CHECK_OK(tr_scope_dispose(s0));
    CHECK(tu_valid(later) == 0);
    CHECK(tu_valid(in_s2) == 0);
}

/* Out of order with the outermost scope: after disposing it under an open inner scope, the inner
 * scope has no outer, so move_to_outer_scope detaches; after the inner scope ends, no scope is
 * current and new handles belong to the caller. */
static void out_of_order_dispose_of_outermost(void) {
    tr_scope a = {0}, b = {0}, c = {0}, cur = {0};
    tr_tensor t = {0}, u = {0}, v = {0};
    REQUIRE_OK(tr_scope_new(&a));
    REQUIRE_OK(tr_scope_new(&b));
    CHECK_OK(tr_scope_dispose(a));
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, b.id);
    REQUIRE_OK(tu_new(&t));
    CHECK_EQ_U(tu_owner(t), b.id);
    CHECK_OK(tr_tensor_move_to_outer_scope(t));
    CHECK_EQ_U(tu_owner(t), 0);
    /* A scope opened now nests in b; moving out of it lands in b. */
    REQUIRE_OK(tr_scope_new(&c));
    REQUIRE_OK(tu_new(&u));
    CHECK_OK(tr_tensor_move_to_outer_scope(u));
    CHECK_EQ_U(tu_owner(u), b.id);
    CHECK_OK(tr_scope_dispose(c));
    CHECK_OK(tr_scope_dispose(b));
    CHECK(tu_valid(u) == 0);
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, 0);
    REQUIRE_OK(tu_new(&v));
    CHECK_EQ_U(tu_owner(v), 0);
    CHECK_OK(tr_tensor_release(v));
    CHECK_OK(tr_tensor_release(t));
}

/* Disposing the innermost scope when the scope under it was already disposed out of order makes
 * the next live scope current. */
static void out_of_order_then_innermost_dispose(void) {
    tr_scope a = {0}, b = {0}, c = {0}, cur = {0};
    tr_tensor t = {0};
    REQUIRE_OK(tr_scope_new(&a));
    REQUIRE_OK(tr_scope_new(&b));
    REQUIRE_OK(tr_scope_new(&c));
    CHECK_OK(tr_scope_dispose(b));
    CHECK_OK(tr_scope_dispose(c));
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, a.id);
    REQUIRE_OK(tu_new(&t));
    CHECK_EQ_U(tu_owner(t), a.id);
    CHECK_OK(tr_scope_dispose(a));
    CHECK(tu_valid(t) == 0);
}

/* dispose_everything drops every owned handle; the scope stays open and keeps capturing. */
static void dispose_everything_keeps_scope_open(void) {
    tr_scope s = {0}, cur = {0};
    tr_tensor t[3] = {{0}, {0}, {0}}, later = {0}, outside = {0};
    size_t len = 9;
    int i;
    REQUIRE_OK(tu_new(&outside));
    REQUIRE_OK(tr_scope_new(&s));
    for (i = 0; i < 3; i++) REQUIRE_OK(tu_new(&t[i]));
    CHECK_OK(tr_scope_stats_reset());
    CHECK_OK(tr_scope_dispose_everything(s));
    CHECK_STATS(0, 0, 0, 3, 0, 0, -3);
    for (i = 0; i < 3; i++) CHECK(tu_valid(t[i]) == 0);
    CHECK(tu_valid(outside) == 1);
    CHECK_OK(tr_scope_len(s, &len));
    CHECK_EQ_U(len, 0);
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, s.id);
    REQUIRE_OK(tu_new(&later));
    CHECK_EQ_U(tu_owner(later), s.id);
    CHECK_OK(tr_scope_dispose_everything(s));
    CHECK(tu_valid(later) == 0);
    CHECK_OK(tr_scope_dispose(s));
    CHECK_OK(tr_tensor_release(outside));
}

/* dispose_everything_but keeps the listed handles it owns, and leaves alone (does not adopt)
 * listed handles it does not own, whether unowned or owned by another scope. */
static void dispose_everything_but_with_foreign_keep(void) {
    tr_scope outer = {0}, s = {0};
    tr_tensor in_outer = {0}, unowned = {0}, keep_me = {0}, drop1 = {0}, drop2 = {0};
    tr_tensor keep[3];
    size_t len = 0;
    REQUIRE_OK(tu_new(&unowned));
    REQUIRE_OK(tr_scope_new(&outer));
    REQUIRE_OK(tu_new(&in_outer));
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tu_new(&keep_me));
    REQUIRE_OK(tu_new(&drop1));
    REQUIRE_OK(tu_new(&drop2));
    keep[0] = unowned;
    keep[1] = keep_me;
    keep[2] = in_outer;
    CHECK_OK(tr_scope_stats_reset());
    CHECK_OK(tr_scope_dispose_everything_but(s, keep, 3));
    CHECK_STATS(0, 0, 0, 2, 0, 0, -2);
    CHECK(tu_valid(drop1) == 0);
    CHECK(tu_valid(drop2) == 0);
    CHECK(tu_valid(keep_me) == 1);
    CHECK_EQ_U(tu_owner(keep_me), s.id);
    CHECK(tu_valid(unowned) == 1);
    CHECK_EQ_U(tu_owner(unowned), 0); /* not adopted */
    CHECK(tu_valid(in_outer) == 1);
    CHECK_EQ_U(tu_owner(in_outer), outer.id);
    CHECK_OK(tr_scope_len(s, &len));
    CHECK_EQ_U(len, 1);
    /* Kept handles die with the scope. */
    CHECK_OK(tr_scope_dispose(s));
    CHECK(tu_valid(keep_me) == 0);
    CHECK(tu_valid(in_outer) == 1);
    CHECK_OK(tr_scope_dispose(outer));
    CHECK(tu_valid(in_outer) == 0);
    CHECK(tu_valid(unowned) == 1);
    CHECK_OK(tr_tensor_release(unowned));
}

/* A bad handle in `keep` fails the call and releases nothing. */
static void dispose_everything_but_bad_keep_releases_nothing(void) {
    tr_scope s = {0};
    tr_tensor a = {0}, b = {0}, dead = {0};
    tr_tensor keep[2];
    size_t len = 0;
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tu_new(&a));
    REQUIRE_OK(tu_new(&b));
    REQUIRE_OK(tu_new(&dead));
    CHECK_OK(tr_tensor_release(dead));
    keep[0] = a;
    keep[1] = dead;
    CHECK_ERR(tr_scope_dispose_everything_but(s, keep, 2), TR_ERR_STALE_HANDLE, "stale");
    CHECK(tu_valid(a) == 1);
    CHECK(tu_valid(b) == 1);
    CHECK_OK(tr_scope_len(s, &len));
    CHECK_EQ_U(len, 2);
    CHECK_ERR(tr_scope_dispose_everything_but(s, NULL, 1), TR_ERR_NULL_ARG, "keep");
    CHECK(tu_valid(b) == 1);
    CHECK_OK(tr_scope_dispose_everything_but(s, NULL, 0)); /* = dispose_everything */
    CHECK(tu_valid(a) == 0);
    CHECK(tu_valid(b) == 0);
    CHECK_OK(tr_scope_dispose(s));
}

/* Moving into a disposed scope is TR_ERR_SCOPE_DISPOSED and changes nothing. */
static void move_into_disposed_scope_fails(void) {
    tr_scope s = {0}, gone = {0};
    tr_tensor t = {0}, u = {0};
    REQUIRE_OK(tr_scope_new(&gone));
    CHECK_OK(tr_scope_dispose(gone));
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tu_new(&t));
    CHECK_OK(tr_scope_stats_reset());
    CHECK_ERR(tr_tensor_move_to_scope(t, gone), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_EQ_U(tu_owner(t), s.id);
    CHECK_ERR(tr_scope_attach(gone, t), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_EQ_U(tu_owner(t), s.id);
    CHECK_OK(tr_scope_dispose(s));
    /* An unowned handle stays unowned (and alive) after the failed move. */
    REQUIRE_OK(tu_new(&u));
    CHECK_ERR(tr_tensor_move_to_scope(u, gone), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_EQ_U(tu_owner(u), 0);
    CHECK_STATS(1, 0, 0, 1, 0, 0, 0);
    CHECK(tu_valid(t) == 0);
    CHECK_OK(tr_tensor_release(u));
}

/* Moving a handle to its own scope is a no-op (TorchSharp lost the handle here). */
static void move_to_own_scope_is_noop(void) {
    tr_scope s = {0};
    tr_tensor t = {0};
    size_t len = 0;
    bool in = false;
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tu_new(&t));
    CHECK_OK(tr_scope_stats_reset());
    CHECK_OK(tr_tensor_move_to_scope(t, s));
    CHECK_STATS(0, 0, 0, 0, 0, 0, 0);
    CHECK_OK(tr_scope_len(s, &len));
    CHECK_EQ_U(len, 1);
    CHECK_OK(tr_scope_contains(s, t, &in));
    CHECK(in);
    CHECK(tu_valid(t) == 1);
    CHECK_OK(tr_scope_dispose(s));
    CHECK(tu_valid(t) == 0); /* still owned, so it died with the scope */
    CHECK_STATS(0, 0, 0, 1, 0, 0, -1);
}

/* move_to_scope into an outer and an unrelated (sibling-later) scope, and the handle 0 target. */
static void move_to_scope_between_scopes(void) {
    tr_scope a = {0}, b = {0}, zero = {0};
    tr_tensor t = {0}, u = {0};
    REQUIRE_OK(tr_scope_new(&a));
    REQUIRE_OK(tr_scope_new(&b));
    REQUIRE_OK(tu_new(&t));
    REQUIRE_OK(tu_new(&u));
    CHECK_OK(tr_tensor_move_to_scope(t, a));
    CHECK_EQ_U(tu_owner(t), a.id);
    /* attach from another scope moves it too */
    CHECK_OK(tr_scope_attach(b, t));
    CHECK_EQ_U(tu_owner(t), b.id);
    CHECK_OK(tr_tensor_move_to_scope(u, zero));
    CHECK_EQ_U(tu_owner(u), 0);
    CHECK_OK(tr_scope_dispose(b));
    CHECK(tu_valid(t) == 0);
    CHECK(tu_valid(u) == 1);
    CHECK_OK(tr_scope_dispose(a));
    CHECK_OK(tr_tensor_release(u));
}

/* tr_scope_move_to_outer only moves handles the given scope owns. */
static void scope_move_to_outer_needs_ownership(void) {
    tr_scope a = {0}, b = {0};
    tr_tensor in_a = {0}, in_b = {0};
    REQUIRE_OK(tr_scope_new(&a));
    REQUIRE_OK(tu_new(&in_a));
    REQUIRE_OK(tr_scope_new(&b));
    REQUIRE_OK(tu_new(&in_b));
    CHECK_OK(tr_scope_move_to_outer(b, in_a)); /* b does not own it: nothing happens */
    CHECK_EQ_U(tu_owner(in_a), a.id);
    CHECK_OK(tr_scope_move_to_outer(b, in_b));
    CHECK_EQ_U(tu_owner(in_b), a.id);
    CHECK_OK(tr_scope_move_to_outer(a, in_b)); /* a has no outer: detached */
    CHECK_EQ_U(tu_owner(in_b), 0);
    CHECK_OK(tr_scope_dispose(b));
    CHECK_OK(tr_scope_dispose(a));
    CHECK(tu_valid(in_a) == 0);
    CHECK(tu_valid(in_b) == 1);
    CHECK_OK(tr_tensor_release(in_b));
}

/* Membership is by handle identity: an alias of an owned handle is a separate member. */
static void membership_is_by_identity(void) {
    tr_scope a = {0}, b = {0};
    tr_tensor t = {0}, al = {0};
    bool in = true;
    REQUIRE_OK(tu_new(&t));
    REQUIRE_OK(tr_scope_new(&a));
    REQUIRE_OK(tr_tensor_alias(t, &al));
    CHECK_EQ_U(tu_owner(al), a.id);
    CHECK_EQ_U(tu_owner(t), 0);
    CHECK_OK(tr_scope_contains(a, t, &in));
    CHECK(!in);
    REQUIRE_OK(tr_scope_new(&b));
    CHECK_OK(tr_scope_attach(b, t));
    CHECK_OK(tr_scope_contains(a, t, &in));
    CHECK(!in);
    CHECK_OK(tr_scope_dispose(b));
    CHECK(tu_valid(t) == 0);
    CHECK(tu_valid(al) == 1); /* the alias has its own life */
    CHECK_OK(tr_scope_dispose(a));
    CHECK(tu_valid(al) == 0);
}

/* A scope drops one reference per owned handle: a retained handle survives its scope, detached,
 * and dies with its last release. */
static void retained_handle_survives_scope(void) {
    tr_scope s = {0};
    tr_tensor t = {0};
    tr_stats st;
    REQUIRE_OK(tr_scope_new(&s));
    REQUIRE_OK(tu_new(&t));
    CHECK_OK(tr_scope_stats_reset());
    CHECK_OK(tr_tensor_retain(t));
    CHECK_OK(tr_scope_dispose(s));
    CHECK(tu_valid(t) == 1);
    CHECK_EQ_U(tu_owner(t), 0);
    CHECK_OK(tr_tensor_release(t));
    CHECK(tu_valid(t) == 0);
    CHECK_OK(tr_scope_stats_get(&st));
    CHECK(st.live == -1);
    CHECK_EQ_U(st.disposed_in_scope + st.disposed_outside_scope, 1);
}

/* Queries: current scope through nesting, len and contains, and tr_tensor_scope. */
static void scope_queries(void) {
    tr_scope a = {0}, b = {0}, cur = {1};
    tr_tensor t = {0};
    size_t len = 9;
    bool in = false;
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, 0);
    REQUIRE_OK(tr_scope_new(&a));
    CHECK(a.id != 0);
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, a.id);
    REQUIRE_OK(tr_scope_new(&b));
    CHECK(b.id != a.id);
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, b.id);
    CHECK_OK(tr_scope_len(b, &len));
    CHECK_EQ_U(len, 0);
    REQUIRE_OK(tu_new(&t));
    CHECK_OK(tr_scope_len(b, &len));
    CHECK_EQ_U(len, 1);
    CHECK_OK(tr_scope_contains(b, t, &in));
    CHECK(in);
    CHECK_OK(tr_scope_contains(a, t, &in));
    CHECK(!in);
    CHECK_OK(tr_scope_dispose(b));
    CHECK_OK(tr_scope_contains(a, t, &in)); /* false for a released handle, not an error */
    CHECK(!in);
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, a.id);
    CHECK_OK(tr_scope_dispose(a));
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, 0);
}

/* Statistics only grow and reset() zeroes them. */
static void stats_reset_zeroes(void) {
    tr_tensor t = {0};
    CHECK_OK(tr_scope_stats_reset());
    REQUIRE_OK(tu_new(&t));
    CHECK_OK(tr_tensor_release(t));
    CHECK_STATS(1, 1, 0, 0, 0, 0, 0);
    CHECK_OK(tr_scope_stats_reset());
    CHECK_STATS(0, 0, 0, 0, 0, 0, 0);
    CHECK_ERR(tr_scope_stats_get(NULL), TR_ERR_NULL_ARG, "out");
}

int main(void) {
    RUN(fact01_create_in_scope_then_attach_to_own_scope);
    RUN(fact02_detach_then_dispose_scope_keeps_handle);
    RUN(fact03_dispose_handle_in_scope_twice);
    RUN(fact04_dispose_scope_disposes_handle);
    RUN(fact05_create_and_dispose_outside);
    RUN(fact06_attach_then_dispose_handle_or_scope);
    RUN(fact07_attach_detach_then_dispose_scope);
    RUN(fact08_detach_unowned_changes_nothing);
    RUN(fact09_unrelated_scope_leaves_attachment);
    RUN(fact10_four_handles_four_fates);
    RUN(fact11_expression_temporaries_die_with_scope);
    RUN(fact12_inner_scope_restores_live);
    RUN(fact13_mlp_training_loop_in_one_scope);
    RUN(fact14_move_to_scope_of_unowned_and_across_nesting);
    RUN(out_of_order_dispose_relinks_inner_scope);
    RUN(out_of_order_dispose_of_outermost);
    RUN(out_of_order_then_innermost_dispose);
    RUN(dispose_everything_keeps_scope_open);
    RUN(dispose_everything_but_with_foreign_keep);
    RUN(dispose_everything_but_bad_keep_releases_nothing);
    RUN(move_into_disposed_scope_fails);
    RUN(move_to_own_scope_is_noop);
    RUN(move_to_scope_between_scopes);
    RUN(scope_move_to_outer_needs_ownership);
    RUN(membership_is_by_identity);
    RUN(retained_handle_survives_scope);
    RUN(scope_queries);
    RUN(stats_reset_zeroes);
    return tu_finish();
}

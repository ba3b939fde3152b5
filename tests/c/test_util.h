/*
 * Tiny test harness shared by the C tests of libtensorref (header only, no dependencies).
 *
 * CHECK(cond) and the CHECK_* macros record a failure and go on; REQUIRE_OK(call) also leaves
 * the test function. RUN(test) runs one `static void test(void)` and counts it as passed when
 * none of its checks failed, no tensor handle leaked (tr_live_handles() is back where it was)
 * and no scope was left open. tu_finish() prints the closing line `N passed, N failed` and
 * returns the exit code (non-zero on any failure).
 */
#ifndef TENSORREF_TEST_UTIL_H
#define TENSORREF_TEST_UTIL_H

#include "tensorref.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tu_tests_passed;
static int tu_tests_failed;
static long tu_checks;
static int tu_failures_in_test;
static const char *tu_test_name = "(no test)";

static inline void tu_fail_here(const char *file, int line, const char *what) {
    tu_failures_in_test++;
    fprintf(stderr, "%s:%d: in %s: %s\n", file, line, tu_test_name, what);
}

/* The calling thread's last error message, cut to 1023 bytes (a static buffer: one thread at
 * a time). */
static inline const char *tu_last_error(void) {
    static char buf[1024];
    size_t n = 0;
    char *big;
    buf[0] = '\0';
    if (tr_last_error(buf, sizeof buf, &n) == TR_OK) return buf;
    big = (char *)malloc(n + 1);
    if (big != NULL && tr_last_error(big, n + 1, &n) == TR_OK) {
        snprintf(buf, sizeof buf, "%s", big);
    } else {
        snprintf(buf, sizeof buf, "(tr_last_error failed; message is %zu bytes)", n);
    }
    free(big);
    return buf;
}

/* Case-insensitive substring test. */
static inline int tu_contains(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return 1;
    }
    return n == 0;
}

#define CHECK(cond)                                                               \
    do {                                                                          \
        tu_checks++;                                                              \
        if (!(cond)) tu_fail_here(__FILE__, __LINE__, "CHECK failed: " #cond);    \
    } while (0)

/* Checks that `call` returns TR_OK; on failure prints the status and tr_last_error. */
#define CHECK_OK(call) ((void)tu_check_status(__FILE__, __LINE__, #call, (call), TR_OK, NULL))

/* Like CHECK_OK, and leaves the (void) test function on failure. */
#define REQUIRE_OK(call)                                                          \
    do {                                                                          \
        if (!tu_check_status(__FILE__, __LINE__, #call, (call), TR_OK, NULL)) return; \
    } while (0)

/* Checks that `call` fails with `expected` and that tr_last_error mentions `needle`
 * (case-insensitive; NULL skips the message check). */
#define CHECK_ERR(call, expected, needle) \
    ((void)tu_check_status(__FILE__, __LINE__, #call, (call), (expected), (needle)))

static inline int tu_check_status(const char *file, int line, const char *expr, tr_status got,
                           tr_status want, const char *needle) {
    char what[1536];
    tu_checks++;
    if (got != want) {
        /* the first 300 bytes of the message are enough (a panic's can carry a backtrace) */
        snprintf(what, sizeof what, "%s returned %d (%s), expected %d (%s); last error: %.300s",
                 expr, (int)got, tr_status_str(got), (int)want, tr_status_str(want),
                 got == TR_OK ? "-" : tu_last_error());
        tu_fail_here(file, line, what);
        return 0;
    }
    if (needle != NULL) {
        const char *msg = tu_last_error();
        if (!tu_contains(msg, needle)) {
            snprintf(what, sizeof what, "%s: last error \"%s\" does not mention \"%s\"", expr, msg,
                     needle);
            tu_fail_here(file, line, what);
            return 0;
        }
    }
    return 1;
}

#define CHECK_EQ_U(a, b)                                                                  \
    do {                                                                                  \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);    \
        tu_checks++;                                                                      \
        if (a_ != b_) {                                                                   \
            char w_[256];                                                                 \
            snprintf(w_, sizeof w_, "%s == %s failed: %llu != %llu", #a, #b, a_, b_);     \
            tu_fail_here(__FILE__, __LINE__, w_);                                         \
        }                                                                                 \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                             \
    do {                                                                                  \
        double a_ = (double)(a), b_ = (double)(b);                                        \
        tu_checks++;                                                                      \
        if (!((a_ > b_ ? a_ - b_ : b_ - a_) <= (tol))) {                                                  \
            char w_[256];                                                                 \
            snprintf(w_, sizeof w_, "%s ~= %s failed: %.9g vs %.9g", #a, #b, a_, b_);     \
            tu_fail_here(__FILE__, __LINE__, w_);                                         \
        }                                                                                 \
    } while (0)

/* Compares this thread's statistics with the tuple of docs/dispose-scopes.md:
 * (created_outside, disposed_outside, created_in, disposed_in, attached, detached, live). */
#define CHECK_STATS(co, dout, ci, di, at, de, live) \
    tu_check_stats(__FILE__, __LINE__, (co), (dout), (ci), (di), (at), (de), (live))

static inline void tu_check_stats(const char *file, int line, unsigned long long co, unsigned long long dout,
                           unsigned long long ci, unsigned long long di, unsigned long long at,
                           unsigned long long de, long long live) {
    tr_stats s;
    char what[512];
    tu_checks++;
    memset(&s, 0xff, sizeof s);
    if (tr_scope_stats_get(&s) != TR_OK) {
        tu_fail_here(file, line, "tr_scope_stats_get failed");
        return;
    }
    if (s.created_outside_scope != co || s.disposed_outside_scope != dout ||
        s.created_in_scope != ci || s.disposed_in_scope != di || s.attached_to_scope != at ||
        s.detached_from_scope != de || s.live != live) {
        snprintf(what, sizeof what,
                 "stats (%llu,%llu,%llu,%llu,%llu,%llu,%lld), expected (%llu,%llu,%llu,%llu,%llu,%llu,%lld)",
                 (unsigned long long)s.created_outside_scope,
                 (unsigned long long)s.disposed_outside_scope,
                 (unsigned long long)s.created_in_scope, (unsigned long long)s.disposed_in_scope,
                 (unsigned long long)s.attached_to_scope,
                 (unsigned long long)s.detached_from_scope, (long long)s.live, co, dout, ci, di, at,
                 de, live);
        tu_fail_here(file, line, what);
    }
}

/* Whether `t` is a live tensor handle. */
static inline int tu_valid(tr_tensor t) {
    bool v = true;
    if (tr_tensor_is_valid(t, &v) != TR_OK) return -1;
    return v ? 1 : 0;
}

/* The scope that owns `t` (id 0: none; id UINT64_MAX: the query failed). */
static inline uint64_t tu_owner(tr_tensor t) {
    tr_scope s = {UINT64_MAX};
    if (tr_tensor_scope(t, &s) != TR_OK) return UINT64_MAX;
    return s.id;
}

/* A small f32 tensor (shape {n}) with the given values. */
static inline tr_status tu_f32(const float *values, int64_t n, tr_tensor *out) {
    return tr_tensor_from_data((const uint8_t *)values, (size_t)n * sizeof(float), &n, 1,
                               TR_DTYPE_F32, out);
}

/* A scratch tensor: zeros of shape {2, 2}, f32. */
static inline tr_status tu_new(tr_tensor *out) {
    const int64_t shape[2] = {2, 2};
    return tr_tensor_zeros(shape, 2, TR_DTYPE_F32, out);
}

static inline void tu_run(const char *name, void (*fn)(void)) {
    size_t live_before = tr_live_handles();
    tr_scope cur = {1};
    tu_test_name = name;
    tu_failures_in_test = 0;
    fn();
    if (tr_scope_current(&cur) != TR_OK || cur.id != 0) {
        tu_fail_here(__FILE__, __LINE__, "a scope was left open");
    }
    if (tr_live_handles() != live_before) {
        char what[128];
        snprintf(what, sizeof what, "leak check: %zu live handles before, %zu after", live_before,
                 tr_live_handles());
        tu_fail_here(__FILE__, __LINE__, what);
    }
    if (tu_failures_in_test == 0) {
        tu_tests_passed++;
        printf("ok   %s\n", name);
    } else {
        tu_tests_failed++;
        printf("FAIL %s\n", name);
    }
    fflush(stdout);
    tu_test_name = "(no test)";
}

#define RUN(test) tu_run(#test, test)

static inline int tu_finish(void) {
    printf("(%ld checks)\n", tu_checks);
    printf("%d passed, %d failed\n", tu_tests_passed, tu_tests_failed);
    fflush(stdout);
    return tu_tests_failed == 0 ? 0 : 1;
}

#endif /* TENSORREF_TEST_UTIL_H */

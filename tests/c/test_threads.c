/*
 * Threads against the one shared registry: 8 pthreads, each with its own scope stack, 10,000+
 * ops each, passing handles to each other (retained on one thread, used, attached or released
 * on another). Checks no deadlock (a watchdog alarm kills a hung run), per-thread scopes,
 * statistics and last-error text, scopes disposed from another thread or left open by a thread
 * that exits, and that tr_live_handles() is 0 at the end.
 */
#define _POSIX_C_SOURCE 200809L

#include "test_util.h"

#include <pthread.h>
#include <unistd.h>

enum { NTHREADS = 8, ITERS = 1000, SHARE_EVERY = 4, QCAP = 1024, WATCHDOG_S = 300 };

/* ------------------------------------------------------------------ thread-safe checks */

static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
    int id;
    long ops;
    int failures;
    long sent, received;
    tr_stats stats;
} worker;

static void thread_fail(worker *w, int line, const char *what, tr_status st) {
    char msg[512];
    size_t n = 0;
    msg[0] = '\0';
    if (st != TR_OK && tr_last_error(msg, sizeof msg, &n) != TR_OK) msg[0] = '\0';
    w->failures++;
    pthread_mutex_lock(&print_lock);
    fprintf(stderr, "%s:%d: thread %d: %s (status %d; last error: %s)\n", __FILE__, line, w->id,
            what, (int)st, msg);
    pthread_mutex_unlock(&print_lock);
}

#define TCHECK(cond)                                                 \
    do {                                                             \
        if (!(cond)) thread_fail(w, __LINE__, "CHECK failed: " #cond, TR_OK); \
    } while (0)

/* Runs one library call, counts it as an op, records a failure. */
#define TOK(call)                                                    \
    do {                                                             \
        tr_status st_ = (call);                                      \
        w->ops++;                                                    \
        if (st_ != TR_OK) thread_fail(w, __LINE__, #call, st_);      \
    } while (0)

/* ------------------------------------------------------------------ mailboxes */

typedef struct {
    tr_tensor items[QCAP];
    double expect[QCAP];
    int count;
} mailbox;

static mailbox boxes[NTHREADS];
/* Made by the main thread; every worker retains, reads and releases it all the time. */
static tr_tensor shared_t;
static pthread_mutex_t box_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t barrier;

static int post(int to, tr_tensor t, double expect) {
    int ok = 0;
    pthread_mutex_lock(&box_lock);
    if (boxes[to].count < QCAP) {
        boxes[to].items[boxes[to].count] = t;
        boxes[to].expect[boxes[to].count] = expect;
        boxes[to].count++;
        ok = 1;
    }
    pthread_mutex_unlock(&box_lock);
    return ok;
}

static int take_all(int me, tr_tensor *items, double *expect) {
    int n;
    pthread_mutex_lock(&box_lock);
    n = boxes[me].count;
    memcpy(items, boxes[me].items, (size_t)n * sizeof items[0]);
    memcpy(expect, boxes[me].expect, (size_t)n * sizeof expect[0]);
    boxes[me].count = 0;
    pthread_mutex_unlock(&box_lock);
    return n;
}

/* Checks a received handle, then either releases it or lets `scope` own it (odd/even). */
static void consume(worker *w, tr_tensor t, double expect, tr_scope scope, int keep_in_scope) {
    tr_tensor sum = {0};
    double got = -1;
    TOK(tr_tensor_sum(t, &sum));
    TOK(tr_tensor_item(sum, &got));
    TCHECK(got == 4 * expect);
    TOK(tr_tensor_release(sum));
    if (keep_in_scope && scope.id != 0) {
        TOK(tr_scope_attach(scope, t)); /* another thread's handle, now owned here */
    } else {
        TOK(tr_tensor_release(t)); /* retained on the sender's thread, released here */
    }
    w->received++;
}

static void *share_worker(void *arg) {
    static tr_tensor inbox[NTHREADS][QCAP];
    static double inbox_expect[NTHREADS][QCAP];
    worker *w = (worker *)arg;
    const int64_t shape[1] = {4};
    tr_scope outer = {0}, cur = {1};
    tr_stats st;
    char code[48];
    int it, k, n;
    size_t len = 0;

    TOK(tr_scope_stats_reset());
    TOK(tr_scope_current(&cur));
    TCHECK(cur.id == 0); /* scope stacks are per thread: a new thread has none open */

    /* The last error is per thread: each thread's message survives the others' failures. */
    TCHECK(tr_tensor_zeros(shape, 1, 1000 + w->id, &(tr_tensor){0}) == TR_ERR_INVALID_ARG);
    pthread_barrier_wait(&barrier);
    snprintf(code, sizeof code, "unknown dtype code %d", 1000 + w->id);
    {
        char msg[256];
        size_t m = 0;
        TCHECK(tr_last_error(msg, sizeof msg, &m) == TR_OK && tu_contains(msg, code));
    }

    TOK(tr_scope_new(&outer));
    for (it = 0; it < ITERS; it++) {
        tr_scope s = {0};
        tr_tensor a = {0}, b = {0}, c = {0}, d = {0}, e = {0}, moved = {0};
        double v = (double)(w->id + it), got = -1;
        TOK(tr_scope_new(&s));
        /* a = v, b = v + 1, c = a * b, d = sum(c) = 4 v (v + 1), e = relu(-c) = 0 */
        TOK(tr_tensor_full(shape, 1, tr_scalar_float(v), TR_DTYPE_F32, &a));
        TOK(tr_tensor_add_scalar(a, tr_scalar_float(1), &b));
        TOK(tr_tensor_mul(a, b, &c));
        TOK(tr_tensor_sum(c, &d));
        TOK(tr_tensor_item(d, &got));
        TCHECK(got == 4 * v * (v + 1));
        TOK(tr_tensor_neg(c, &e));
        TOK(tr_tensor_relu(e, &e));
        TOK(tr_tensor_sum(e, &d));
        TOK(tr_tensor_item(d, &got));
        TCHECK(got == 0);
        TOK(tr_tensor_retain(shared_t));
        TOK(tr_tensor_add(a, shared_t, &b));
        TOK(tr_tensor_release(shared_t));
        TOK(tr_tensor_sum(b, &d));
        TOK(tr_tensor_item(d, &got));
        TCHECK(got == 4 * (v + 0.5));
        TCHECK(tu_owner(c) == s.id);
        TOK(tr_scope_len(s, &len));
        TCHECK(len == 9); /* only this thread's handles land in this thread's scope */

        /* Keep one handle per iteration in the long-lived outer scope. */
        TOK(tr_tensor_alias(a, &moved));
        TOK(tr_tensor_move_to_outer_scope(moved));
        TCHECK(tu_owner(moved) == outer.id);

        /* Receive handles from the previous thread. */
        n = take_all(w->id, inbox[w->id], inbox_expect[w->id]);
        for (k = 0; k < n; k++) consume(w, inbox[w->id][k], inbox_expect[w->id][k], s, k % 2 == 0);

        /* Send one to the next thread: detached, retained, used here while the receiver uses
         * it there, then our reference is released (whichever release is last frees it). */
        if (it % SHARE_EVERY == 0) {
            tr_tensor t = {0}, u = {0};
            double value = (double)(w->id * 100000 + it);
            TOK(tr_tensor_full(shape, 1, tr_scalar_float(value), TR_DTYPE_F32, &t));
            TOK(tr_tensor_detach_from_scope(t));
            TOK(tr_tensor_retain(t));
            if (post((w->id + 1) % NTHREADS, t, value)) {
                w->sent++;
            } else {
                TCHECK(!"mailbox full");
                TOK(tr_tensor_release(t));
            }
            TOK(tr_tensor_mul_scalar(t, tr_scalar_float(2), &u));
            TOK(tr_tensor_release(t));
            TCHECK(tu_owner(u) == s.id);
        }
        if (it % 100 == 99) TOK(tr_scope_dispose_everything(outer));
        TOK(tr_scope_dispose(s));
        TOK(tr_scope_current(&cur));
        TCHECK(cur.id == outer.id);
    }
    /* Every sender is done after the barrier: drain what is left. */
    pthread_barrier_wait(&barrier);
    n = take_all(w->id, inbox[w->id], inbox_expect[w->id]);
    for (k = 0; k < n; k++) consume(w, inbox[w->id][k], inbox_expect[w->id][k], outer, k % 2 == 0);
    TOK(tr_scope_dispose(outer));
    TOK(tr_scope_current(&cur));
    TCHECK(cur.id == 0);
    TOK(tr_scope_stats_get(&st));
    w->stats = st;
    return NULL;
}

static void eight_threads_share_handles(void) {
    pthread_t th[NTHREADS];
    worker ws[NTHREADS];
    long long live_sum = 0, created = 0, disposed = 0, sent = 0, received = 0;
    int i, started = 0;
    CHECK(tr_live_handles() == 0);
    REQUIRE_OK(tr_tensor_full((const int64_t[]){4}, 1, tr_scalar_float(0.5), TR_DTYPE_F32, &shared_t));
    memset(ws, 0, sizeof ws);
    CHECK(pthread_barrier_init(&barrier, NULL, NTHREADS) == 0);
    for (i = 0; i < NTHREADS; i++) {
        ws[i].id = i;
        if (pthread_create(&th[i], NULL, share_worker, &ws[i]) == 0) started++;
    }
    CHECK(started == NTHREADS);
    if (started != NTHREADS) {
        fprintf(stderr, "cannot start %d threads; giving up\n", NTHREADS);
        exit(2); /* the barrier would never open */
    }
    for (i = 0; i < NTHREADS; i++) CHECK(pthread_join(th[i], NULL) == 0);
    pthread_barrier_destroy(&barrier);
    for (i = 0; i < NTHREADS; i++) {
        CHECK(ws[i].failures == 0);
        CHECK(ws[i].ops >= 10000);
        live_sum += ws[i].stats.live;
        created += (long long)(ws[i].stats.created_in_scope + ws[i].stats.created_outside_scope);
        disposed += (long long)(ws[i].stats.disposed_in_scope + ws[i].stats.disposed_outside_scope);
        sent += ws[i].sent;
        received += ws[i].received;
    }
    printf("     %d threads: %lld handles created, %lld disposed, %lld passed between threads\n",
           NTHREADS, created, disposed, sent);
    for (i = 0; i < NTHREADS; i++) printf("     thread %d: %ld ops\n", i, ws[i].ops);
    CHECK(sent == (long long)NTHREADS * ((ITERS + SHARE_EVERY - 1) / SHARE_EVERY));
    CHECK(received == sent);
    /* A dispose counts on the thread that disposes: per thread `live` may be off, the sum not. */
    CHECK(live_sum == 0);
    CHECK(created == disposed);
    CHECK(created >= (long long)NTHREADS * ITERS * 8);
    /* No retain or release of the shared handle was lost: exactly one reference is left. */
    CHECK(tu_valid(shared_t) == 1);
    CHECK_OK(tr_tensor_release(shared_t));
    CHECK(tu_valid(shared_t) == 0);
    CHECK(tr_live_handles() == 0);
}

/* ------------------------------------------------------------------ cross-thread scopes */

typedef struct {
    worker w;
    tr_scope outer, inner;
    tr_tensor in_inner, handles[3];
    pthread_barrier_t step;
} scope_ctx;

static void *open_two_scopes(void *arg) {
    scope_ctx *c = (scope_ctx *)arg;
    worker *w = &c->w;
    tr_tensor later = {0};
    tr_scope cur = {0};
    TOK(tr_scope_new(&c->outer));
    TOK(tr_scope_new(&c->inner));
    TOK(tu_new(&c->in_inner));
    pthread_barrier_wait(&c->step); /* main disposes `inner` now */
    pthread_barrier_wait(&c->step);
    TCHECK(tu_valid(c->in_inner) == 0);
    TOK(tr_scope_current(&cur));
    TCHECK(cur.id == c->outer.id); /* the current scope moved to the nearest open one */
    TOK(tu_new(&later));
    TCHECK(tu_owner(later) == c->outer.id);
    TOK(tr_scope_dispose(c->outer));
    TCHECK(tu_valid(later) == 0);
    return NULL;
}

/* A scope may be disposed from another thread (a finalizer, say). */
static void scope_disposed_from_another_thread(void) {
    static scope_ctx c;
    pthread_t th;
    tr_scope cur = {1};
    memset(&c, 0, sizeof c);
    CHECK(pthread_barrier_init(&c.step, NULL, 2) == 0);
    if (pthread_create(&th, NULL, open_two_scopes, &c) != 0) {
        CHECK(!"pthread_create failed");
        return;
    }
    pthread_barrier_wait(&c.step);
    CHECK_OK(tr_scope_current(&cur));
    CHECK_EQ_U(cur.id, 0); /* the other thread's scopes are not current here */
    CHECK_EQ_U(tu_owner(c.in_inner), c.inner.id);
    CHECK_OK(tr_scope_dispose(c.inner));
    pthread_barrier_wait(&c.step);
    CHECK(pthread_join(th, NULL) == 0);
    pthread_barrier_destroy(&c.step);
    CHECK(c.w.failures == 0);
}

static void *leave_scope_open(void *arg) {
    scope_ctx *c = (scope_ctx *)arg;
    worker *w = &c->w;
    int i;
    TOK(tr_scope_new(&c->outer));
    for (i = 0; i < 3; i++) TOK(tu_new(&c->handles[i]));
    TOK(tu_new(&c->in_inner));
    TOK(tr_tensor_detach_from_scope(c->in_inner)); /* belongs to the caller: outlives the thread */
    return NULL; /* exits with `outer` still open */
}

/* A thread that exits with scopes open does not leak their handles; detached handles it made
 * stay valid and can be released by another thread. */
static void thread_exit_disposes_open_scopes(void) {
    static scope_ctx c;
    pthread_t th;
    size_t live = tr_live_handles(), len = 0;
    int i;
    memset(&c, 0, sizeof c);
    if (pthread_create(&th, NULL, leave_scope_open, &c) != 0) {
        CHECK(!"pthread_create failed");
        return;
    }
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(c.w.failures == 0);
    for (i = 0; i < 3; i++) CHECK(tu_valid(c.handles[i]) == 0);
    CHECK_ERR(tr_scope_len(c.outer, &len), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK(tu_valid(c.in_inner) == 1);
    CHECK_EQ_U(tr_live_handles(), live + 1);
    CHECK_OK(tr_tensor_release(c.in_inner));
    CHECK_EQ_U(tr_live_handles(), live);
}

/* ------------------------------------------------------------------ release races */

enum { RACE_HANDLES = 400, READERS = 3 };
static tr_tensor race[RACE_HANDLES];

/* Reads handles another thread is releasing: each call must either work or say the handle is
 * stale, never crash or return anything else. */
static void *race_reader(void *arg) {
    worker *w = (worker *)arg;
    int round, i, stale = 0;
    for (round = 0; round < 20 && stale < RACE_HANDLES; round++) {
        stale = 0;
        for (i = 0; i < RACE_HANDLES; i++) {
            tr_tensor sum = {0};
            tr_status st = tr_tensor_sum(race[i], &sum);
            w->ops++;
            if (st == TR_OK) {
                TOK(tr_tensor_release(sum));
            } else if (st == TR_ERR_STALE_HANDLE) {
                stale++;
            } else {
                thread_fail(w, __LINE__, "tr_tensor_sum on a handle being released", st);
            }
        }
    }
    return NULL;
}

static void *race_releaser(void *arg) {
    worker *w = (worker *)arg;
    int i;
    for (i = 0; i < RACE_HANDLES; i++) TOK(tr_tensor_release(race[i]));
    return NULL;
}

static void release_while_other_threads_read(void) {
    pthread_t th[READERS + 1];
    worker ws[READERS + 1];
    const int64_t shape[2] = {8, 8};
    int i;
    memset(ws, 0, sizeof ws);
    for (i = 0; i < RACE_HANDLES; i++) REQUIRE_OK(tr_tensor_ones(shape, 2, TR_DTYPE_F32, &race[i]));
    for (i = 0; i < READERS; i++) {
        ws[i].id = i;
        CHECK(pthread_create(&th[i], NULL, race_reader, &ws[i]) == 0);
    }
    ws[READERS].id = READERS;
    CHECK(pthread_create(&th[READERS], NULL, race_releaser, &ws[READERS]) == 0);
    for (i = 0; i <= READERS; i++) CHECK(pthread_join(th[i], NULL) == 0);
    for (i = 0; i <= READERS; i++) CHECK(ws[i].failures == 0);
    for (i = 0; i < RACE_HANDLES; i++) CHECK(tu_valid(race[i]) == 0);
}

/* ------------------------------------------------------------------ grad mode */

static void *disable_grad(void *arg) {
    worker *w = (worker *)arg;
    bool prev = false;
    TOK(tr_grad_set_enabled(false, &prev));
    TCHECK(prev); /* a new thread starts with grad mode on */
    return NULL;
}

/* libtorch's grad mode is per thread: turning it off elsewhere leaves this thread tracking. */
static void grad_mode_is_per_thread(void) {
    pthread_t th;
    worker w;
    tr_tensor x = {0}, y = {0};
    tr_scope s = {0};
    bool rg = false;
    memset(&w, 0, sizeof w);
    CHECK(pthread_create(&th, NULL, disable_grad, &w) == 0);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(w.failures == 0);
    REQUIRE_OK(tr_scope_new(&s));
    CHECK_OK(tu_new(&x));
    CHECK_OK(tr_tensor_requires_grad_(x, true));
    CHECK_OK(tr_tensor_mul_scalar(x, tr_scalar_float(2), &y));
    CHECK_OK(tr_tensor_requires_grad(y, &rg));
    CHECK(rg);
    CHECK_OK(tr_scope_dispose(s));
}

int main(void) {
    alarm(WATCHDOG_S); /* a deadlock ends the run with SIGALRM instead of hanging the build */
    RUN(eight_threads_share_handles);
    RUN(scope_disposed_from_another_thread);
    RUN(thread_exit_disposes_open_scopes);
    RUN(release_while_other_threads_read);
    RUN(grad_mode_is_per_thread);
    return tu_finish();
}

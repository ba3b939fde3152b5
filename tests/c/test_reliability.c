/*
 * Regressions of the reliability review (issue 22) through the C ABI: two handles that are one
 * libtorch tensor, a manager that must always turn off, PyTorch's promotion of 0-dim tensors,
 * arange's errors as statuses, DLPack descriptions checked before use, imports of one memory that
 * an op sees as one, and imports at any alignment computing as their memory does.
 */
#include "test_util.h"

#include <pthread.h>
#include <stdint.h>

static const tr_policy POLICIES[3] = {TR_POLICY_RESIDENT, TR_POLICY_GENOA, TR_POLICY_FLOW};

static tr_status configure(tr_policy policy, uint64_t budget, tr_recompute recompute) {
    tr_residency_config cfg;
    tr_status st = tr_residency_config_default(&cfg);
    if (st != TR_OK) return st;
    cfg.device = TR_DEVICE_SIMULATED;
    cfg.policy = policy;
    cfg.budget_bytes = budget;
    cfg.recompute = recompute;
    return tr_residency_configure(&cfg);
}

static tr_tensor filled(int64_t n, float value) {
    float data[1024];
    tr_tensor t = {0};
    int64_t i;
    for (i = 0; i < n; i++) data[i] = value;
    if (tr_tensor_from_data((const uint8_t *)data, (size_t)n * sizeof(float), &n, 1, TR_DTYPE_F32, &t) != TR_OK)
        t.id = 0;
    return t;
}

/* Whether every element of `t` (at most 1024 float32) equals `value`. */
static int all_equal(tr_tensor t, float value) {
    float data[1024];
    size_t written = 0, i;
    if (tr_tensor_copy_to(t, (uint8_t *)data, sizeof data, &written) != TR_OK) return 0;
    for (i = 0; i < written / sizeof(float); i++)
        if (data[i] != value) return 0;
    return written > 0;
}

/* `contiguous` of a contiguous tensor is the same libtorch tensor: a write through it, then its
 * release, must not lose the write, under every policy. */
static void write_through_a_second_handle_of_one_tensor(void) {
    int p;
    for (p = 0; p < 3; p++) {
        tr_tensor x = filled(64, 1.0f), y = {0};
        REQUIRE_OK(tr_tensor_contiguous(x, &y));
        REQUIRE_OK(configure(POLICIES[p], 16384, TR_RECOMPUTE_OFF));
        CHECK_OK(tr_tensor_fill_(y, tr_scalar_float(5.0)));
        CHECK_OK(tr_tensor_release(y));
        CHECK(all_equal(x, 5.0f));
        CHECK_OK(tr_residency_disable());
        CHECK(all_equal(x, 5.0f));
        CHECK_OK(tr_tensor_release(x));
    }
}

/* r's recipe reads x1 and x2 (6 KiB in all); a pin of 4 KiB leaves less than that beside it in
 * the 8 KiB budget. Turning the manager off must still make r again, and lose nothing. */
static void a_manager_with_pins_and_dropped_results_turns_off(void) {
    tr_tensor x1 = filled(512, 1.0f), x2 = filled(512, 2.0f), w = filled(1024, 5.0f);
    tr_tensor r = {0}, a = {0}, b = {0};
    tr_residency_stats stats;
    REQUIRE_OK(configure(TR_POLICY_FLOW, 8192, TR_RECOMPUTE_ALWAYS));
    CHECK_OK(tr_tensor_add(x1, x2, &r));
    CHECK_OK(tr_tensor_mul_scalar(x1, tr_scalar_float(3.0), &a));
    CHECK_OK(tr_tensor_mul_scalar(x2, tr_scalar_float(4.0), &b));
    CHECK_OK(tr_residency_stats_get(&stats));
    CHECK(stats.drops >= 1);
    CHECK_OK(tr_tensor_pin_resident(w, true));
    CHECK_OK(tr_residency_disable());
    CHECK(all_equal(r, 3.0f));
    CHECK(all_equal(a, 3.0f));
    CHECK(all_equal(b, 8.0f));
    CHECK(all_equal(w, 5.0f));
    CHECK_OK(tr_tensor_release(x1));
    CHECK_OK(tr_tensor_release(x2));
    CHECK_OK(tr_tensor_release(w));
    CHECK_OK(tr_tensor_release(r));
    CHECK_OK(tr_tensor_release(a));
    CHECK_OK(tr_tensor_release(b));
}

/* A float scalar keeps a 0-dim float32 tensor float32, in place too (computed in float32, as
 * PyTorch does: 1.1f * 0.3 rounded once). */
static void a_scalar_keeps_the_dtype_of_a_0_dim_tensor(void) {
    float v = 1.1f, got = 0.0f;
    tr_tensor t = {0}, p = {0};
    tr_dtype dtype;
    size_t written;
    REQUIRE_OK(tr_tensor_from_data((const uint8_t *)&v, sizeof v, NULL, 0, TR_DTYPE_F32, &t));
    REQUIRE_OK(tr_tensor_mul_scalar(t, tr_scalar_float(0.3), &p));
    CHECK_OK(tr_tensor_dtype(p, &dtype));
    CHECK(dtype == TR_DTYPE_F32);
    CHECK_OK(tr_tensor_mul_scalar_(t, tr_scalar_float(0.3)));
    CHECK_OK(tr_tensor_copy_to(t, (uint8_t *)&got, sizeof got, &written));
    CHECK(got == v * 0.3f);
    CHECK_OK(tr_tensor_release(t));
    CHECK_OK(tr_tensor_release(p));
}

/* arange's libtorch errors are statuses with a short message, never a caught panic. */
static void arange_errors_are_statuses(void) {
    const double cases[4][3] = {{0, 1e30, 1}, {0, 1e12, 1}, {0, 5, 0}, {5, 0, 1}};
    tr_tensor out = {42};
    tr_status st;
    int i;
    for (i = 0; i < 4; i++) {
        st = tr_tensor_arange(cases[i][0], cases[i][1], cases[i][2], TR_DTYPE_F32, &out);
        CHECK(st != TR_OK && st != TR_ERR_PANIC);
        CHECK(strlen(tu_last_error()) < 400);
    }
    CHECK_ERR(tr_tensor_arange(0, 10, 1, TR_DTYPE_BOOL, &out), TR_ERR_DTYPE, "Bool");
    CHECK_EQ_U(out.id, 42);
}

/* dlpack.h's unversioned structs, as a producer fills them. */
typedef struct {
    void *data;
    int32_t device_type, device_id, ndim;
    uint8_t code, bits;
    uint16_t lanes;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed {
    dl_tensor t;
    void *ctx;
    void (*deleter)(struct dl_managed *);
} dl_managed;

static int deleted;
static void count_deletion(dl_managed *m) {
    (void)m;
    deleted++;
}

/* A description that would make libtorch read through a bad pointer is refused, naming what is
 * wrong, and the producer's deleter runs once. */
static void dlpack_descriptions_are_checked(void) {
    float data[16] = {0};
    int64_t shape[1] = {16}, negative[1] = {-4};
    const char *needles[5] = {"ndim -1", "NULL data for 16 elements", "unknown dtype code 9", "negative size -4", "ndim 1000"};
    int k;
    for (k = 0; k < 5; k++) {
        dl_managed m = {{data, 1, 0, 1, 2, 32, 1, shape, NULL, 0}, NULL, count_deletion};
        tr_tensor out = {42};
        size_t live = tr_live_handles();
        if (k == 0) m.t.ndim = -1;
        if (k == 1) m.t.data = NULL;
        if (k == 2) m.t.code = 9;
        if (k == 3) m.t.shape = negative;
        if (k == 4) m.t.ndim = 1000;
        deleted = 0;
        CHECK_ERR(tr_tensor_from_dlpack(&m, &out), TR_ERR_INVALID_ARG, needles[k]);
        CHECK(deleted == 1);
        CHECK_EQ_U(out.id, 42);
        CHECK_EQ_U(tr_live_handles(), live);
    }
}

/* Six threads each run small ops under Flow with room for two ops' working sets at once: an op
 * that fits the budget by itself waits for room rather than failing, and every thread ends with
 * the values the same work gives alone. */
#define BUDGET_THREADS 6
#define BUDGET_STEPS 300

typedef struct {
    int index;
    tr_status failed; /* the first failing status, or TR_OK */
    float result[256];
} budget_worker;

static void *budget_work(void *arg) {
    budget_worker *w = (budget_worker *)arg;
    float init[256];
    int64_t shape[2] = {16, 16};
    tr_tensor x = {0}, m = {0}, next = {0};
    size_t written;
    int i, step;
    for (i = 0; i < 256; i++) init[i] = (float)((i * 7 + w->index) % 13) / 16.0f;
    w->failed = tr_tensor_from_data((const uint8_t *)init, sizeof init, shape, 2, TR_DTYPE_F32, &x);
    if (w->failed == TR_OK) w->failed = tr_tensor_from_data((const uint8_t *)init, sizeof init, shape, 2, TR_DTYPE_F32, &m);
    for (step = 0; step < BUDGET_STEPS && w->failed == TR_OK; step++) {
        w->failed = step % 2 ? tr_tensor_tanh(x, &next) : tr_tensor_matmul(x, m, &next);
        if (w->failed == TR_OK) {
            tr_tensor_release(x);
            x = next;
        }
    }
    if (w->failed == TR_OK) w->failed = tr_tensor_copy_to(x, (uint8_t *)w->result, sizeof w->result, &written);
    tr_tensor_release(x);
    tr_tensor_release(m);
    return NULL;
}

static void threads_share_a_tight_budget(void) {
    budget_worker alone[BUDGET_THREADS], together[BUDGET_THREADS];
    pthread_t th[BUDGET_THREADS];
    int i;
    /* One op's working set: two 1 KiB inputs and a 1 KiB result. */
    REQUIRE_OK(configure(TR_POLICY_FLOW, 2 * 3 * 1024, TR_RECOMPUTE_OFF));
    for (i = 0; i < BUDGET_THREADS; i++) {
        alone[i].index = together[i].index = i;
        budget_work(&alone[i]);
    }
    for (i = 0; i < BUDGET_THREADS; i++) CHECK(pthread_create(&th[i], NULL, budget_work, &together[i]) == 0);
    for (i = 0; i < BUDGET_THREADS; i++) pthread_join(th[i], NULL);
    CHECK_OK(tr_residency_disable());
    for (i = 0; i < BUDGET_THREADS; i++) {
        CHECK(alone[i].failed == TR_OK);
        CHECK(together[i].failed == TR_OK);
        CHECK(memcmp(alone[i].result, together[i].result, sizeof alone[i].result) == 0);
    }
}

/* On the simulated device the budget holds of the memory its allocator counts: each op's result
 * finds room before it is allocated. A chain of adds at a budget of three 4 KiB tensors (two
 * inputs and a result) stays within it, under Genoa and Flow, and nothing is left after. */
static void the_allocator_never_counts_more_than_the_budget(void) {
    int p;
    for (p = 1; p < 3; p++) {
        tr_tensor a = filled(1024, 1.0f), b = filled(1024, 0.5f), c = {0};
        tr_device_memory m;
        int i;
        REQUIRE_OK(configure(POLICIES[p], 3 * 4096, TR_RECOMPUTE_OFF));
        for (i = 0; i < 16; i++) {
            CHECK_OK(tr_tensor_add(a, b, &c));
            CHECK_OK(tr_tensor_release(a));
            a = c;
        }
        CHECK_OK(tr_residency_device_memory(false, &m));
        CHECK(m.peak >= 2 * 4096 && m.peak <= 3 * 4096);
        CHECK(all_equal(a, 9.0f));
        CHECK_OK(tr_residency_disable());
        CHECK_OK(tr_residency_device_memory(false, &m));
        CHECK(m.live == 0 && m.in_flight == 0);
        CHECK_OK(tr_tensor_release(a));
        CHECK_OK(tr_tensor_release(b));
    }
    CHECK(tr_residency_device_memory(false, NULL) == TR_ERR_NULL_ARG);
}

/* z = zeros_like(x) and s = sqrt(z) are both dropped under Genoa; pinning z first remakes s
 * (which needs z, so z is made too, and evicted again as the remake ends): whether z is resident
 * must be asked after that, or a dropped result is loaded as if it had a home (fuzzer seed
 * 6103561: a panic). */
static void pinning_a_result_that_remakes_bring_back(void) {
    tr_tensor x = filled(96, 2.0f), z = {0}, s = {0};
    bool resident = false;
    REQUIRE_OK(configure(TR_POLICY_GENOA, 768, TR_RECOMPUTE_ALWAYS));
    CHECK_OK(tr_tensor_zeros_like(x, &z));
    CHECK(all_equal(z, 0.0f));
    CHECK_OK(tr_tensor_sqrt(z, &s));
    CHECK(all_equal(z, 0.0f) && all_equal(s, 0.0f));
    CHECK_OK(tr_tensor_pin_resident(z, true));
    CHECK_OK(tr_tensor_is_resident(z, &resident));
    CHECK(resident);
    CHECK(all_equal(s, 0.0f));
    CHECK_OK(tr_residency_disable());
    CHECK(all_equal(z, 0.0f));
    CHECK_OK(tr_tensor_release(s));
    CHECK_OK(tr_tensor_release(z));
    CHECK_OK(tr_tensor_release(x));
    CHECK(tr_panics_caught() == 0);
}

/* One C buffer imported three times: the whole of it, and two views of it one element apart.
 * `ahead += behind` then reads, at each element, the neighbour the op may already have written:
 * without a manager libtorch sees one memory. Under every policy the op must see the same (the
 * three imports were copied to the device apart, and each element read its neighbour's old
 * value). */
#define SHIFTED 64
static dl_managed imports[3];

static void shifted_add(float *data, int policy) {
    int64_t whole_shape[1] = {SHIFTED + 1}, shape[1] = {SHIFTED};
    tr_tensor t[3] = {{0}, {0}, {0}}, sum = {0};
    float *starts[3] = {data, data + 1, data};
    int k;
    for (k = 0; k < 3; k++) {
        dl_managed m = {{starts[k], 1, 0, 1, 2, 32, 1, k == 0 ? whole_shape : shape, NULL, 0}, NULL, count_deletion};
        imports[k] = m;
        REQUIRE_OK(tr_tensor_from_dlpack(&imports[k], &t[k]));
    }
    if (policy >= 0) REQUIRE_OK(configure(POLICIES[policy], 1 << 16, TR_RECOMPUTE_OFF));
    CHECK_OK(tr_tensor_neg(t[0], &sum)); /* the manager knows the whole memory before the op */
    CHECK_OK(tr_tensor_add_(t[1], t[2]));
    if (policy >= 0) CHECK_OK(tr_residency_disable());
    CHECK_OK(tr_tensor_release(sum));
    for (k = 0; k < 3; k++) CHECK_OK(tr_tensor_release(t[k]));
}

static void imports_of_one_memory_are_one_memory_to_an_op(void) {
    float want[SHIFTED + 1], apart[SHIFTED + 1], got[SHIFTED + 1];
    int i, p;
    for (i = 0; i <= SHIFTED; i++) want[i] = apart[i] = (float)(i + 1);
    for (i = SHIFTED; i >= 1; i--) apart[i] += apart[i - 1]; /* each element read the old neighbour */
    shifted_add(want, -1);
    CHECK(memcmp(want, apart, sizeof want) != 0); /* the test can tell the two apart */
    for (p = 0; p < 3; p++) {
        for (i = 0; i <= SHIFTED; i++) got[i] = (float)(i + 1);
        shifted_add(got, p);
        CHECK(memcmp(got, want, sizeof want) == 0);
    }
}

/* An import 24 bytes into a 64-byte aligned buffer: the simulated device's copy keeps that
 * alignment, so that the matrix product takes the path, and rounds, as it does on the memory
 * itself without a manager (fuzzer seed 1479199: 1 ulp apart when the copy was 64-byte aligned). */
static void product_of_an_import(float *data, int policy, float *out) {
    int64_t shape[2] = {5, 6};
    tr_tensor t = {0}, tt = {0}, s = {0}, p = {0};
    size_t written = 0;
    dl_managed m = {{data + 6, 1, 0, 2, 2, 32, 1, shape, NULL, 0}, NULL, count_deletion};
    imports[0] = m;
    REQUIRE_OK(tr_tensor_from_dlpack(&imports[0], &t));
    if (policy >= 0) REQUIRE_OK(configure(POLICIES[policy], 1 << 16, TR_RECOMPUTE_OFF));
    CHECK_OK(tr_tensor_transpose(t, 0, 1, &tt));
    CHECK_OK(tr_tensor_sigmoid(tt, &s));
    CHECK_OK(tr_tensor_matmul(t, s, &p));
    CHECK_OK(tr_tensor_copy_to(p, (uint8_t *)out, 25 * sizeof(float), &written));
    CHECK(written == 25 * sizeof(float));
    if (policy >= 0) CHECK_OK(tr_residency_disable());
    CHECK_OK(tr_tensor_release(p));
    CHECK_OK(tr_tensor_release(s));
    CHECK_OK(tr_tensor_release(tt));
    CHECK_OK(tr_tensor_release(t));
}

static void an_import_at_any_alignment_computes_as_its_memory_does(void) {
    _Alignas(64) float data[36];
    float want[25], got[25];
    int i, p;
    for (i = 0; i < 36; i++) data[i] = (float)((i * 7 + 4) % 9 - 2);
    product_of_an_import(data, -1, want);
    for (p = 0; p < 3; p++) {
        product_of_an_import(data, p, got);
        CHECK(memcmp(got, want, sizeof want) == 0);
    }
}

int main(void) {
    RUN(write_through_a_second_handle_of_one_tensor);
    RUN(pinning_a_result_that_remakes_bring_back);
    RUN(the_allocator_never_counts_more_than_the_budget);
    RUN(a_manager_with_pins_and_dropped_results_turns_off);
    RUN(a_scalar_keeps_the_dtype_of_a_0_dim_tensor);
    RUN(arange_errors_are_statuses);
    RUN(dlpack_descriptions_are_checked);
    RUN(threads_share_a_tight_budget);
    RUN(imports_of_one_memory_are_one_memory_to_an_op);
    RUN(an_import_at_any_alignment_computes_as_its_memory_does);
    return tu_finish();
}

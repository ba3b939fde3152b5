// What users write, as in the Python and .NET suites (issue 13): integer scalars that keep an
// integer tensor integer and exact, compound assignments with scalars in place, `s / a` a true
// division, temporaries inside braced lists (under every residency policy, where releases are
// immediate), and an event callback that calls back into the library, which must get an error
// rather than deadlock (a watchdog ends the program instead of letting it hang).
#include "tensorref.hpp"

#include "harness.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

using tr::Tensor;

namespace {

std::vector<int64_t> i64s(const Tensor& t) { return t.to_vector<int64_t>(); }

/// Ends the process with a message if `done` is not set within `seconds`: a deadlock must fail
/// the suite, not hang it.
class Watchdog {
  public:
    Watchdog(const char* what, int seconds) {
        std::thread([this, what, seconds] {
            for (int i = 0; i < seconds * 10; i++) {
                if (done_.load()) return;
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
            }
            std::fprintf(stderr, "WATCHDOG: %s did not finish in %d s (a deadlock?)\n", what, seconds);
            std::_Exit(3);
        }).detach();
    }
    ~Watchdog() { done_.store(true); }
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

  private:
    // Static: the detached thread may outlive this object (it then only reads `true`).
    static inline std::atomic<bool> done_{false};
};

}  // namespace

TEST(integer_scalars_keep_an_integer_tensor_integer_and_exact) {
    Tensor idx = Tensor::from_vector(std::vector<int64_t>{0, 1});
    Tensor next = idx + 1;
    CHECK(next.dtype() == tr::DType::I64);
    CHECK_EQ(i64s(next), (std::vector<int64_t>{1, 2}));
    Tensor emb = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {3, 2});
    CHECK_EQ(emb.index_select(0, idx + 1).to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
    Tensor big = Tensor::from_vector(std::vector<int64_t>{int64_t{1} << 60});
    CHECK_EQ(i64s(big + 1), (std::vector<int64_t>{(int64_t{1} << 60) + 1}));
    CHECK_EQ(i64s(tr::full({1}, (int64_t{1} << 62) + 1, tr::DType::I64)), (std::vector<int64_t>{(int64_t{1} << 62) + 1}));
    CHECK_THROWS(tr::full({1}, 1.0 / 0.0, tr::DType::I64), TR_ERR_INVALID_ARG, "does not fit");
    Tensor odd = Tensor::from_vector(std::vector<int64_t>{(int64_t{1} << 53) + 1});
    CHECK(odd.item_scalar().is_int());
    CHECK_EQ(odd.item_scalar().to_int(), (int64_t{1} << 53) + 1);
    CHECK((idx + 0.5).dtype() == tr::DType::F32);  // a float still promotes, as in PyTorch
    CHECK((idx / 2).dtype() == tr::DType::F32);    // true division
}

TEST(compound_assignment_with_scalars_is_in_place) {
    Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3});
    Tensor view = a.alias();
    uint64_t id = a.raw().id;
    a += 2;
    a -= 0.5;
    a /= 2;
    a *= 4;
    CHECK_EQ(a.raw().id, id);
    CHECK_EQ(view.to_vector<float>(), (std::vector<float>{5, 7, 9}));
    Tensor ints = Tensor::from_vector(std::vector<int64_t>{7, -7});
    ints %= 3;
    CHECK_EQ(i64s(ints), (std::vector<int64_t>{1, 2}));  // Python's sign, as PyTorch's %
    CHECK_THROWS(ints /= 2, TR_ERR_DTYPE, "can't be cast");  // an int64 tensor cannot hold a true quotient
}

// s / t as PyTorch computes it, t^-1 * s (some 1 ulp off the correctly rounded quotient): the
// same results as without the library.
TEST(scalar_over_tensor_is_pytorchs) {
    std::vector<float> xs;
    for (int i = 1; i <= 1000; i++) xs.push_back(static_cast<float>(i) * 0.37f + 0.01f);
    std::vector<float> want;
    for (float x : xs) want.push_back((1.0f / x) * 3.0f);
    CHECK_EQ((3.0 / Tensor::from_vector(xs)).to_vector<float>(), want);
}

TEST(temporaries_in_braced_lists_live_through_the_call_under_every_policy) {
    Tensor a = Tensor::from_vector(std::vector<float>{1, 2});
    for (tr::Policy p : {tr::Policy::Resident, tr::Policy::Genoa, tr::Policy::Flow}) {
        tr::Residency r(tr::ResidencyConfig(p, 1 << 20));
        for (int i = 0; i < 20; i++) {
            CHECK_EQ(tr::stack({a + 1, a * 2}, 0).to_vector<float>(), (std::vector<float>{2, 3, 2, 4}));
            CHECK_EQ(tr::cat({a - 1, -a}, 0).to_vector<float>(), (std::vector<float>{0, 1, -1, -2}));
        }
    }
    CHECK_THROWS(tr::cat({}, 0), TR_ERR_INVALID_ARG, "at least one tensor");
}

// The core's re-entrancy guard (src/residency) makes the callback's call an error; without it the
// call deadlocks on the manager's lock, and the watchdog ends the program.
TEST(a_callback_that_calls_the_library_gets_an_error_not_a_deadlock) {
    Watchdog dog("a callback calling tr::ones", 60);
    Tensor a = tr::randn({8, 8});
    int calls = 0;
    tr::Residency r(tr::ResidencyConfig(tr::Policy::Flow, 64 * 1024), [&](const tr::Event&) {
        calls++;
        Tensor t = tr::ones({1});  // throws: the manager is busy with this very op
    });
    Tensor b = a.matmul(a);
    CHECK(calls >= 1);
    try {
        r.rethrow_callback_error();
        harness::fail(__FILE__, __LINE__, "the callback's call into the library did not fail");
    } catch (const tr::Error& e) {
        CHECK(e.status() != TR_OK);
        CHECK(!e.message().empty());
    }
    CHECK_EQ(b.shape(), (std::vector<int64_t>{8, 8}));  // the op itself went on
}

// Ownership in the C++ binding: what tr::Tensor and tr::Scope release, and when.
//
// Moved-from owners release nothing; move assignment releases the old reference; retain() and
// alias() are the only copies; a Scope is disposed on every exit path, exceptions included;
// a Tensor may die on another thread; NoGradGuard restores the grad mode. The harness checks
// after each test that tr_live_handles() is back where it started.
#include "tensorref.hpp"

#include "harness.hpp"

#include <stdexcept>
#include <thread>
#include <type_traits>

using tr::Scope;
using tr::Tensor;

static_assert(!std::is_copy_constructible_v<Tensor> && !std::is_copy_assignable_v<Tensor>);
static_assert(std::is_nothrow_move_constructible_v<Tensor> && std::is_nothrow_move_assignable_v<Tensor>);
static_assert(!std::is_copy_constructible_v<Scope> && !std::is_copy_assignable_v<Scope>);
static_assert(std::is_nothrow_move_constructible_v<Scope> && std::is_nothrow_move_assignable_v<Scope>);
static_assert(std::is_nothrow_destructible_v<Tensor> && std::is_nothrow_destructible_v<Scope>);
static_assert(!std::is_convertible_v<double, Tensor>, "no implicit scalar-to-tensor conversion");

TEST(moved_from_tensor_releases_nothing) {
    size_t base = tr::live_handles();
    Tensor b;
    {
        Tensor a = tr::ones({3});
        tr_tensor raw = a.raw();
        b = std::move(a);
        CHECK(!a);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
        CHECK_EQ(a.raw().id, uint64_t(0));
        CHECK_EQ(b.raw().id, raw.id);
    }  // a's destructor runs here and must not release b's handle
    CHECK(b.is_valid());
    CHECK_EQ(tr::live_handles(), base + 1);
    CHECK_STATS(1, 0, 0, 0, 0, 0, 1);
    Tensor c(std::move(b));
    CHECK(!b && c.is_valid());
    b = Tensor();  // assigning to the moved-from owner releases nothing either
    CHECK(c.is_valid());
    CHECK_EQ(tr::live_handles(), base + 1);
}

TEST(move_assignment_releases_the_old_reference) {
    size_t base = tr::live_handles();
    Tensor a = tr::ones({2});
    Tensor b = tr::zeros({2});
    tr_tensor old = a.raw();
    a = std::move(b);
    CHECK_EQ(tr::live_handles(), base + 1);
    Tensor probe = Tensor::adopt(old);
    CHECK(!probe.is_valid());
    (void)probe.into_raw();
    CHECK_EQ(a.to_vector<float>(), (std::vector<float>{0, 0}));
    CHECK_STATS(2, 1, 0, 0, 0, 0, 1);
}

TEST(retain_is_a_second_owner_of_the_same_handle) {
    size_t base = tr::live_handles();
    Tensor a = tr::ones({2});
    {
        Tensor b = a.retain();
        CHECK_EQ(b.raw().id, a.raw().id);
        CHECK_EQ(tr::live_handles(), base + 1);  // one handle, two references
    }
    CHECK(a.is_valid());  // b dropped only its own reference
    Tensor c = a.retain();
    a.dispose();
    CHECK(c.is_valid());
    c.dispose();
    CHECK(!c);  // an owner is empty after dispose
    CHECK_EQ(tr::live_handles(), base);
    CHECK_STATS(1, 1, 0, 0, 0, 0, 0);
}

// A retain inside a scope: the scope drops one reference, so the handle outlives the scope
// (detached) until the first of its two owners lets go (documented in tensorref.hpp). That
// final release counts outside a scope: the handle had no owning scope any more.
TEST(retain_in_a_scope_outlives_the_scope_until_one_owner_lets_go) {
    Tensor a, b;
    {
        Scope s;
        a = tr::ones({2});
        b = a.retain();
    }
    CHECK(a.is_valid() && b.is_valid());
    CHECK(!a.scope());
    a = Tensor();
    CHECK(!b.is_valid());
    b = Tensor();  // the dead handle: nothing happens
    CHECK_STATS(0, 1, 1, 0, 0, 0, 0);
}

TEST(alias_is_a_new_handle_sharing_storage) {
    Tensor a = tr::zeros({3});
    Tensor b = a.alias();
    CHECK(b.raw().id != a.raw().id);
    b += tr::ones({3});  // in place on the shared storage
    CHECK_EQ(a.to_vector<float>(), (std::vector<float>{1, 1, 1}));
    a.dispose();
    CHECK(b.is_valid());
    CHECK_EQ(b.to_vector<float>(), (std::vector<float>{1, 1, 1}));
    CHECK_STATS(3, 2, 0, 0, 0, 0, 1);  // a, b and the ones({3}) temporary
}

TEST(into_raw_and_adopt_hand_ownership_across_the_c_abi) {
    Tensor a = tr::ones({4});
    tr_tensor raw = a.into_raw();
    CHECK(!a);
    bool valid = false;
    CHECK(tr_tensor_is_valid(raw, &valid) == TR_OK && valid);  // not released by into_raw
    Tensor back = Tensor::adopt(raw);
    CHECK_EQ(back.numel(), size_t(4));
}

TEST(dispose_reports_a_handle_its_scope_already_released) {
    Tensor t;
    {
        Scope s;
        t = tr::ones({1});
    }
    CHECK_THROWS(t.dispose(), TR_ERR_STALE_HANDLE, "");
    CHECK(!t);  // emptied even so
}

TEST(scope_destructor_disposes_when_an_exception_unwinds) {
    Tensor t;
    bool caught = false;
    try {
        Scope s;
        t = tr::ones({2});
        CHECK(t.scope() == s);
        throw std::runtime_error("boom");
    } catch (const std::runtime_error&) {
        caught = true;
    }
    CHECK(caught);
    CHECK(!t.is_valid());
    CHECK(!tr::ScopeRef::current());
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
}

TEST(scope_destructor_disposes_when_an_op_throws) {
    Tensor kept = tr::ones({2});
    Tensor inside;
    CHECK_THROWS(([&] {
                     Scope s;
                     inside = kept + 1.0;
                     Tensor bad = inside.matmul(tr::ones({3, 3}));  // shapes do not fit: throws
                 }()),
                 TR_ERR_SHAPE, "");
    CHECK(!inside.is_valid());
    CHECK(kept.is_valid());
    CHECK(!tr::ScopeRef::current());
    CHECK_STATS(1, 0, 2, 2, 0, 0, 1);  // ones({3, 3}) was created in the scope too
}

TEST(with_scope_returns_and_disposes_on_every_path) {
    Tensor escaped;
    double total = tr::with_scope([&](Scope& s) {
        Tensor a = tr::ones({4}) * 3.0;
        escaped = a.retain();
        escaped.move_to_outer_scope();  // no outer scope: detached
        CHECK_EQ(s.size(), size_t(0));
        return a.sum().item();
    });
    CHECK_EQ(total, 12.0);
    CHECK(escaped.is_valid());
    CHECK_THROWS(tr::with_scope([](Scope&) -> int { throw tr::Error(TR_ERR_INVALID_ARG, "mine"); }),
                 TR_ERR_INVALID_ARG, "mine");
    CHECK(!tr::ScopeRef::current());
}

TEST(scope_move_transfers_the_duty_to_dispose) {
    Tensor t;
    std::vector<Scope> scopes;
    {
        Scope s;
        t = tr::ones({1});
        scopes.push_back(std::move(s));
        CHECK(!s);  // NOLINT(bugprone-use-after-move)
    }  // the moved-from scope disposes nothing
    CHECK(t.is_valid());
    CHECK(t.scope() == scopes.back());
    Scope other;
    other = std::move(scopes.back());  // disposes `other`'s own scope, takes over the first
    CHECK(t.is_valid());
    CHECK(tr::ScopeRef::current() == other);
    other = Scope();  // disposes the first scope; the new one opens and becomes current
    CHECK(!t.is_valid());
    CHECK(tr::ScopeRef::current() == other);
}

TEST(temporaries_die_at_the_end_of_the_full_expression) {
    Tensor x = tr::ones({8});
    Scope s;
    size_t base = tr::live_handles();
    Tensor y = ((x * 2.0 + 1.0) * (x - 3.0)).relu() / 4.0;
    CHECK_EQ(tr::live_handles(), base + 1);  // only y: five temporaries already released
    CHECK_EQ(s.size(), size_t(1));
    CHECK_STATS(1, 0, 6, 5, 0, 0, 2);
}

TEST(in_place_on_an_rvalue_moves_the_owner) {
    size_t base = tr::live_handles();
    Tensor w = tr::randn({3}).mul_scalar_(0.1).requires_grad_(true);  // one handle, moved along
    CHECK(w.requires_grad());
    CHECK_EQ(tr::live_handles(), base + 1);
    CHECK_STATS(1, 0, 0, 0, 0, 0, 1);
    Tensor x = tr::ones({2});
    Tensor& same = x.mul_scalar_(2.0);  // on an lvalue: the same owner, by reference
    CHECK(&same == &x);
    CHECK_EQ(x.to_vector<float>(), (std::vector<float>{2, 2}));
}

TEST(tensor_released_on_another_thread) {
    Tensor t = tr::ones({16});
    size_t base = tr::live_handles();
    std::thread([moved = std::move(t)]() mutable { moved = Tensor(); }).join();
    CHECK_EQ(tr::live_handles(), base - 1);
    // The dispose counted on the thread that disposed, not here.
    CHECK_STATS(1, 0, 0, 0, 0, 0, 1);
}

TEST(no_grad_guard_restores_the_mode) {
    Tensor w = tr::ones({2}).requires_grad_(true);
    {
        tr::NoGradGuard guard;
        CHECK(!(w * 2.0).requires_grad());
        {
            tr::NoGradGuard nested;
        }
        CHECK(!(w * 2.0).requires_grad());  // the nested guard restored "off", not "on"
    }
    CHECK((w * 2.0).requires_grad());
}

TEST(device_and_live_bytes_name_devices_as_the_config_does) {
    uint64_t before = tr::live_bytes();
    {
        Tensor t = tr::zeros({4, 8}, tr::DType::F64);
        CHECK(t.device() == tr::Device::Cpu);
        CHECK_EQ(t.device_index(), 0);
        CHECK_EQ(tr::live_bytes(tr::Device::Cpu), before + 4 * 8 * 8);
        CHECK_EQ(tr::live_bytes(tr::Device::Cuda, 0), uint64_t{0});  // no CUDA handle
        CHECK_THROWS(tr::live_bytes(tr::Device::Simulated), TR_ERR_INVALID_ARG, "host memory");
        CHECK_THROWS(tr::live_bytes(tr::Device::Cuda, -1), TR_ERR_INVALID_ARG, "device index -1");
    }
    CHECK_EQ(tr::live_bytes(), before);
}

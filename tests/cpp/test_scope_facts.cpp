// The numbered statistics facts 1-14 of docs/dispose-scopes.md, through the C++ binding.
//
// Each fact is one test comparing the spec's tuple (created_outside, disposed_outside,
// created_in, disposed_in, attached, detached, live) exactly, starting from a reset with no scope
// open (the harness resets before each test and checks that no handle leaked). The C++ owners
// add one twist the C tests cannot show: a Tensor object that outlives its scope holds a dead
// handle, and destroying it must change no counter.
#include "tensorref.hpp"

#include "harness.hpp"

using tr::Scope;
using tr::Tensor;

namespace {

Tensor make() { return tr::ones({2, 2}); }

}  // namespace

// 1. Create in a scope -> (0,0,1,0,0,0,1). Attach it to the scope it is already in -> unchanged.
TEST(fact01_create_in_scope_then_attach_to_own_scope) {
    Scope s;
    Tensor t = make();
    CHECK_STATS(0, 0, 1, 0, 0, 0, 1);
    CHECK(t.scope() == s);
    s.attach(t);
    CHECK_STATS(0, 0, 1, 0, 0, 0, 1);
    CHECK(s.contains(t));
    CHECK_EQ(s.size(), size_t(1));
}

// 2. ...then detach -> (0,0,1,0,0,1,1); then dispose the scope -> unchanged, the handle is alive.
TEST(fact02_detach_then_dispose_scope_keeps_handle) {
    Tensor t;
    {
        Scope s;
        t = make();
        s.attach(t);
        s.detach(t);
        CHECK_STATS(0, 0, 1, 0, 0, 1, 1);
        CHECK(!t.scope());
    }
    CHECK_STATS(0, 0, 1, 0, 0, 1, 1);
    CHECK(t.is_valid());
    t.dispose();  // no owner any more: counts outside
    CHECK_STATS(0, 1, 1, 0, 0, 1, 0);
}

// 3. Create in a scope, dispose the handle -> (0,0,1,1,0,0,0); a second dispose changes nothing.
TEST(fact03_dispose_handle_in_scope_twice) {
    Scope s;
    Tensor t = make();
    tr_tensor raw = t.raw();
    t.dispose();
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
    CHECK(!t);
    CHECK_EQ(s.size(), size_t(0));
    t.dispose();  // an empty owner: nothing to release
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
    // The same dead handle disposed through another owner is reported, and counts nothing.
    CHECK_THROWS(Tensor::adopt(raw).dispose(), TR_ERR_STALE_HANDLE, "stale");
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
}

// 4. Create in a scope, dispose the scope -> (0,0,1,1,0,0,0).
TEST(fact04_dispose_scope_disposes_handle) {
    Tensor t;
    {
        Scope s;
        t = make();
    }
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
    CHECK(t);              // the owner still holds the handle...
    CHECK(!t.is_valid());  // ...which the scope released
    t = Tensor();          // dropping the owner of a dead handle counts nothing
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
}

// 5. Create outside -> (1,0,0,0,0,0,1); dispose -> (1,1,0,0,0,0,0).
TEST(fact05_create_and_dispose_outside) {
    Tensor t = make();
    CHECK_STATS(1, 0, 0, 0, 0, 0, 1);
    CHECK(!t.scope());
    t.dispose();
    CHECK_STATS(1, 1, 0, 0, 0, 0, 0);
}

// 6. Create outside, attach to a scope -> (1,0,0,0,1,0,1); then dispose the handle, or the
//    scope -> (1,0,0,1,1,0,0).
TEST(fact06_attach_then_dispose_handle_or_scope) {
    {
        Tensor t = make();
        Scope s;
        s.attach(t);
        CHECK_STATS(1, 0, 0, 0, 1, 0, 1);
        CHECK(t.scope() == s);
        t.dispose();
        CHECK_STATS(1, 0, 0, 1, 1, 0, 0);
        CHECK_EQ(s.size(), size_t(0));
    }
    tr::Stats::reset();
    {
        Tensor t = make();
        {
            Scope s;
            s.attach(t);
            CHECK_STATS(1, 0, 0, 0, 1, 0, 1);
        }
        CHECK_STATS(1, 0, 0, 1, 1, 0, 0);
        CHECK(!t.is_valid());
    }
    CHECK_STATS(1, 0, 0, 1, 1, 0, 0);
}

// 7. Create outside, attach, detach -> (1,0,0,0,1,1,1); disposing the scope afterwards changes
//    nothing.
TEST(fact07_attach_detach_then_dispose_scope) {
    Tensor t = make();
    {
        Scope s;
        s.attach(t);
        s.detach(t);
        CHECK_STATS(1, 0, 0, 0, 1, 1, 1);
    }
    CHECK_STATS(1, 0, 0, 0, 1, 1, 1);
    CHECK(t.is_valid());
}

// 8. Detaching a handle that no scope owns changes nothing.
TEST(fact08_detach_unowned_changes_nothing) {
    Tensor t = make();
    t.detach_from_scope();
    CHECK_STATS(1, 0, 0, 0, 0, 0, 1);
    Scope unrelated;
    unrelated.detach(t);
    t.detach_from_scope();
    CHECK_STATS(1, 0, 0, 0, 0, 0, 1);
    CHECK(!t.scope());
}

// 9. Attach to scope A, open and dispose an unrelated scope B -> unchanged; A still owns it.
TEST(fact09_unrelated_scope_leaves_attachment) {
    Tensor t = make();
    Scope a;
    a.attach(t);
    CHECK_STATS(1, 0, 0, 0, 1, 0, 1);
    {
        Scope b;
        CHECK(tr::ScopeRef::current() == b);
    }
    CHECK_STATS(1, 0, 0, 0, 1, 0, 1);
    CHECK(a.contains(t));
    CHECK(t.scope() == a);
    CHECK(tr::ScopeRef::current() == a);
}

// 10. Four handles in one scope: one kept, one detached, one moved out of the outermost scope,
//     one disposed by hand. After the scope: live = 2, created_in = 4, disposed_in = 2,
//     detached = 2.
TEST(fact10_four_handles_four_fates) {
    Tensor kept, detached, moved, disposed;
    {
        Scope s;
        kept = make();
        detached = make();
        moved = make();
        disposed = make();
        detached.detach_from_scope();
        moved.move_to_outer_scope();  // no outer scope: it becomes detached
        disposed.dispose();
        CHECK_EQ(s.size(), size_t(1));
        CHECK(s.contains(kept));
    }
    CHECK_STATS(0, 0, 4, 2, 0, 2, 2);
    CHECK(!kept.is_valid());
    CHECK(detached.is_valid() && moved.is_valid());
    CHECK(!detached.scope() && !moved.scope());
    kept = Tensor();  // dead already: counts nothing
    detached = Tensor();
    moved = Tensor();
    CHECK_STATS(0, 2, 4, 2, 0, 2, 0);
}

// 11. Temporaries of an expression on a tensor made outside the scope are all owned by the scope
//     and all dead after it; the outside tensor is untouched.
TEST(fact11_expression_temporaries_die_with_scope) {
    Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4});
    Tensor t0, t1, t2, t3;  // owners outside the scope: only the scope can end these handles
    {
        Scope s;
        // sum(exp(x * 0.5 + 1)), each temporary kept by name
        t0 = x * 0.5;
        t1 = t0 + 1.0;
        t2 = t1.exp();
        t3 = t2.sum();
        CHECK(std::abs(t3.item() - 44.1387760531) < 1e-3);  // e^1.5 + e^2 + e^2.5 + e^3
        CHECK_EQ(s.size(), size_t(4));
        for (const Tensor* t : {&t0, &t1, &t2, &t3}) CHECK(t->scope() == s);
        CHECK(!x.scope());
        CHECK_STATS(1, 0, 4, 0, 0, 0, 5);
        // The same expression unnamed: its temporaries were owned by the scope too, and their
        // C++ owners ended them at the end of the full expression.
        double again = (x * 0.5 + 1.0).exp().sum().item();
        CHECK_EQ(again, t3.item());
        CHECK_STATS(1, 0, 8, 4, 0, 0, 5);
        CHECK_EQ(s.size(), size_t(4));
    }
    for (const Tensor* t : {&t0, &t1, &t2, &t3}) CHECK(!t->is_valid());
    CHECK_STATS(1, 0, 8, 8, 0, 0, 1);
    CHECK(x.is_valid());
    CHECK_EQ(x.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

// 12. After an inner scope ends, `live` equals its value before the inner scope opened; after the
//     outer scope, 0.
TEST(fact12_inner_scope_restores_live) {
    std::vector<Tensor> outer_owned, inner_owned;
    {
        Scope outer;
        for (int i = 0; i < 3; i++) outer_owned.push_back(make());
        int64_t before = tr::Stats::get().live;
        CHECK_EQ(before, int64_t(3));
        {
            Scope inner;
            CHECK(tr::ScopeRef::current() == inner);
            for (int i = 0; i < 5; i++) inner_owned.push_back(make() + outer_owned[0]);
            CHECK_EQ(tr::Stats::get().live, int64_t(8));
        }
        CHECK(tr::ScopeRef::current() == outer);
        CHECK_EQ(tr::Stats::get().live, before);
    }
    CHECK_STATS(0, 0, 13, 13, 0, 0, 0);
    CHECK(!tr::ScopeRef::current());
}

// 13. A full training loop (a two-layer MLP, MSE loss, ten SGD steps reading `grad`) inside one
//     scope, with the parameters created inside it, ends with live = 0.
TEST(fact13_mlp_training_loop_in_one_scope) {
    constexpr int64_t N = 32, IN = 4, HID = 16;
    std::vector<float> xs(N * IN), ys(N);
    for (int64_t i = 0; i < N; i++) {
        float target = 0;
        for (int64_t j = 0; j < IN; j++) {
            xs[i * IN + j] = float((i * 7 + j * 3) % 11) / 11.0f - 0.5f;
            target += float(j + 1) * xs[i * IN + j];
        }
        ys[i] = target;
    }
    size_t live_before = tr::live_handles();
    // The owners live outside the scope, so it is the scope that must end every handle.
    Tensor w1, b1, w2, b2;
    double first_loss = 0, last_loss = 0;
    {
        Scope s;
        tr::manual_seed(13);
        Tensor x = Tensor::from_vector(xs, {N, IN});
        Tensor y = Tensor::from_vector(ys, {N, 1});
        w1 = (tr::randn({HID, IN}) * 0.3).requires_grad_(true);
        b1 = tr::zeros({HID}).requires_grad_(true);
        w2 = (tr::randn({1, HID}) * 0.3).requires_grad_(true);
        b2 = tr::zeros({1}).requires_grad_(true);
        for (int step = 0; step < 10; step++) {
            Tensor loss = x.linear(w1, b1).relu().linear(w2, b2).mse_loss(y);
            double value = loss.item();
            if (step == 0) first_loss = value;
            last_loss = value;
            loss.backward();
            tr::NoGradGuard no_grad;
            for (Tensor* p : {&w1, &b1, &w2, &b2}) {
                std::optional<Tensor> g = p->grad();  // reading grad: a new handle in the scope
                REQUIRE(g.has_value());
                CHECK(g->scope() == s);
                CHECK_EQ(g->shape(), p->shape());
                *p -= *g * 0.1;
                p->zero_grad();
            }
        }
        CHECK(tr::live_handles() > live_before);
    }
    CHECK(last_loss < first_loss * 0.8);
    CHECK_EQ(tr::Stats::get().live, int64_t(0));
    CHECK_EQ(tr::live_handles(), live_before);
    for (Tensor* p : {&w1, &b1, &w2, &b2}) CHECK(!p->is_valid());
    tr::Stats st = tr::Stats::get();
    CHECK(st.created_in_scope > 0);
    CHECK_EQ(st.created_in_scope, st.disposed_in_scope);
    CHECK_EQ(st.created_outside_scope, uint64_t(0));
}

// 14. Moving a handle to the scope of another handle that no scope owns detaches it; moving a
//     handle from the third nested scope to the first makes it survive the third and second and
//     die with the first.
TEST(fact14_move_to_scope_of_unowned_and_across_nesting) {
    Tensor unowned = make();
    Scope s1;
    Tensor t = make();
    CHECK_STATS(1, 0, 1, 0, 0, 0, 2);
    CHECK(!unowned.scope());
    t.move_to_scope(unowned.scope());
    CHECK(!t.scope());
    CHECK_STATS(1, 0, 1, 0, 0, 1, 2);

    Tensor u;
    std::optional<Scope> s2, s3;
    s2.emplace();
    s3.emplace();
    u = make();
    tr::Stats::reset();
    u.move_to_scope(s1);
    CHECK_STATS(0, 0, 0, 0, 0, 0, 0);  // moves between scopes change no counter
    CHECK(u.scope() == s1);
    s3.reset();
    CHECK(u.is_valid());
    s2.reset();
    CHECK(u.is_valid());
    s1.dispose();
    CHECK(!u.is_valid());
    CHECK_STATS(0, 0, 0, 1, 0, 0, -1);
}

// The operations table of docs/dispose-scopes.md beyond the numbered facts, through the
// C++ API: dispose_everything(_but), move_to_outer, moving to its own scope, out-of-order
// disposal (TorchSharp #1303), in-place ops and gradient reads, and per-thread scope stacks.
#include "tensorref.hpp"

#include "harness.hpp"

#include <thread>

using tr::Scope;
using tr::ScopeRef;
using tr::Tensor;

TEST(dispose_everything_keeps_the_scope_open_and_capturing) {
    Scope s;
    Tensor a = tr::ones({1});
    Tensor b = tr::ones({1});
    s.dispose_everything();
    CHECK(!a.is_valid() && !b.is_valid());
    CHECK_EQ(s.size(), size_t(0));
    CHECK(ScopeRef::current() == s);
    Tensor c = tr::ones({1});
    CHECK(c.scope() == s);
    CHECK_STATS(0, 0, 3, 2, 0, 0, 1);
}

TEST(dispose_everything_but_keeps_owned_and_ignores_foreign) {
    Tensor mine_kept, mine_dropped;
    Tensor foreign = tr::ones({1});  // no scope owns it
    Scope other;
    Tensor elsewhere = tr::ones({1});  // owned by `other`
    {
        Scope s;
        mine_kept = tr::ones({1});
        mine_dropped = tr::ones({1});
        s.dispose_everything_but({mine_kept, foreign, elsewhere});
        CHECK(mine_kept.is_valid());
        CHECK(!mine_dropped.is_valid());
        CHECK(s.contains(mine_kept));  // kept handles stay owned...
        CHECK(!s.contains(foreign));   // ...foreign ones are not adopted
        CHECK(!foreign.scope());
        CHECK(elsewhere.scope() == other);
        CHECK_EQ(s.size(), size_t(1));
    }
    CHECK(!mine_kept.is_valid());  // kept handles die with the scope
    CHECK(foreign.is_valid() && elsewhere.is_valid());
    CHECK_STATS(1, 0, 3, 2, 0, 0, 2);
}

TEST(dispose_everything_but_with_a_dead_keep_releases_nothing) {
    Tensor dead = tr::ones({1});
    tr_tensor raw = dead.raw();
    dead.dispose();
    Tensor zombie = Tensor::adopt(raw);  // an owner of the dead handle, for the list only
    Scope s;
    Tensor t = tr::ones({1});
    CHECK_THROWS(s.dispose_everything_but({t, zombie}), TR_ERR_STALE_HANDLE, "");
    CHECK(t.is_valid());
    CHECK_EQ(s.size(), size_t(1));
    (void)zombie.into_raw();
}

TEST(scope_move_to_outer_only_moves_what_it_owns) {
    Scope outer;
    Tensor in_outer = tr::ones({1});
    Scope inner;
    Tensor in_inner = tr::ones({1});
    inner.move_to_outer(in_outer);  // inner does not own it: nothing changes
    CHECK(in_outer.scope() == outer);
    inner.move_to_outer(in_inner);
    CHECK(in_inner.scope() == outer);
    inner.dispose();
    CHECK(in_inner.is_valid());
    CHECK_STATS(0, 0, 2, 0, 0, 0, 2);  // moves between scopes change no counter
}

TEST(moving_to_its_own_scope_is_a_no_op) {
    Scope s;
    Tensor t = tr::ones({1});
    t.move_to_scope(s);
    t.move_to_scope(s);
    CHECK(t.scope() == s);
    CHECK_EQ(s.size(), size_t(1));  // not lost, not duplicated
    CHECK_STATS(0, 0, 1, 0, 0, 0, 1);
    s.dispose();
    CHECK(!t.is_valid());
    CHECK_STATS(0, 0, 1, 1, 0, 0, 0);
}

TEST(move_to_scope_with_the_null_scope_detaches) {
    Scope s;
    Tensor t = tr::ones({1});
    t.move_to_scope(ScopeRef());
    CHECK(!t.scope());
    CHECK_STATS(0, 0, 1, 0, 0, 1, 1);
}

// TorchSharp #1303: disposing a scope that is not the innermost leaked there.
TEST(out_of_order_dispose_relinks_and_keeps_the_current_scope) {
    Scope s0;
    std::optional<Scope> s1;
    s1.emplace();
    Tensor in_s1 = tr::ones({1});
    Scope s2;
    Tensor in_s2 = tr::ones({1});
    s1->dispose();  // not the innermost
    CHECK(!in_s1.is_valid());
    CHECK(in_s2.is_valid());
    CHECK(ScopeRef::current() == s2);
    CHECK_THROWS(s1->size(), TR_ERR_SCOPE_DISPOSED, "");
    Tensor later = tr::ones({1});
    CHECK(later.scope() == s2);
    later.move_to_outer_scope();
    CHECK(later.scope() == s0);  // s1 is gone: the nearest live outer scope
    s1.reset();                  // destroying the disposed owner does nothing
    CHECK(in_s2.is_valid());
    s2.dispose();
    CHECK(ScopeRef::current() == s0);
    CHECK(later.is_valid());
}

TEST(in_place_ops_register_nothing_and_return_the_same_handle) {
    Scope s;
    Tensor t = tr::zeros({3});
    Tensor one = tr::ones({3});
    tr::Stats before = tr::Stats::get();
    uint64_t id = t.raw().id;
    t.add_(one).mul_scalar_(3.0).sub_(one).requires_grad_(false);
    t.copy_(one);
    t.zero_();
    CHECK_EQ(t.raw().id, id);
    CHECK(tr::Stats::get() == before);
    CHECK_EQ(s.size(), size_t(2));
}

TEST(each_gradient_read_is_a_new_registered_handle) {
    Tensor w = tr::ones({2}).requires_grad_(true);
    (w * 3.0).sum().backward();
    Scope s;
    std::optional<Tensor> g1 = w.grad();
    std::optional<Tensor> g2 = w.grad();
    REQUIRE(g1 && g2);
    CHECK(g1->raw().id != g2->raw().id);
    CHECK(g1->scope() == s && g2->scope() == s);
    CHECK_EQ(s.size(), size_t(2));
    CHECK_EQ(g1->to_vector<float>(), (std::vector<float>{3, 3}));
}

TEST(scope_stacks_are_per_thread) {
    Scope mine;
    Tensor made_there;
    std::thread([&] {
        CHECK(!ScopeRef::current());  // this thread has no scope open
        made_there = tr::ones({1});
    }).join();
    CHECK(!made_there.scope());  // not captured by the other thread's scope
    CHECK_EQ(mine.size(), size_t(0));
    CHECK_STATS(0, 0, 0, 0, 0, 0, 0);  // the creation counted on the creating thread
}

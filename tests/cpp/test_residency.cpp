// The residency manager through the C++ binding (tr::Residency) on the simulated device.
//
// Results under Genoa and Flow equal the unmanaged results bit for bit at every budget from the
// smallest feasible up; the device bytes at every event (seen through the std::function callback)
// never exceed the budget; a too-small budget and an over-budget pin throw tr::Error with
// TR_ERR_BUDGET_TOO_SMALL naming the op; the timeline file is written; a throwing callback never
// unwinds into the library; the RAII object disables the manager and owns it alone. The harness
// checks after each test that no handle leaked.
#include "tensorref.hpp"

#include "harness.hpp"

#include <array>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

using tr::Policy;
using tr::Recompute;
using tr::Residency;
using tr::ResidencyConfig;
using tr::ResidencyStats;
using tr::Tensor;

static_assert(!std::is_copy_constructible_v<Residency> && !std::is_copy_assignable_v<Residency>);
static_assert(std::is_nothrow_move_constructible_v<Residency> && std::is_nothrow_destructible_v<Residency>);

namespace {

constexpr uint64_t KiB = 1024;

/// What a callback saw: the highest device byte count at any event, and counts per kind.
struct Watch {
    uint64_t budget = 0;
    uint64_t events = 0;
    uint64_t max_device_bytes = 0;
    uint64_t over_budget = 0;  // events whose device bytes exceeded the budget
    uint64_t op_begins = 0, op_ends = 0, loads = 0, unnamed_ops = 0;

    tr::EventCallback callback() {
        return [this](const tr::Event& e) {
            events++;
            if (e.device_bytes > max_device_bytes) max_device_bytes = e.device_bytes;
            if (e.device_bytes > budget) over_budget++;
            if (e.kind == tr::EventKind::OpBegin) op_begins++;
            if (e.kind == tr::EventKind::OpEnd) op_ends++;
            if (e.kind == tr::EventKind::Load) loads++;
            if ((e.kind == tr::EventKind::OpBegin || e.kind == tr::EventKind::OpEnd) && e.op[0] == '\0') unnamed_ops++;
        };
    }
};

/// Six 32x32 layers (4 KiB each) over a 48x32 input (6 KiB). A pass keeps every layer's output
/// alive, so under a small budget Flow must evict dirty results (write-backs) and reload them.
struct Stack {
    std::vector<Tensor> weights;
    Tensor x;

    static Stack make() {
        tr::manual_seed(7);
        Stack s;
        for (int i = 0; i < 6; i++) s.weights.push_back(tr::randn({32, 32}) * (1.0 / 32));
        s.x = tr::randn({48, 32});
        return s;
    }

    /// The largest working set of one op: add(t, x) holds two 6 KiB inputs and a 6 KiB result.
    static constexpr uint64_t smallest_budget = 18 * KiB;

    /// Every layer's output, concatenated, read back while the manager (if any) still runs.
    std::vector<float> pass() const {
        tr::Scope scope;
        std::vector<Tensor> kept;
        kept.reserve(weights.size());
        const Tensor* h = &x;
        for (const Tensor& w : weights) {
            kept.push_back(h->matmul(w).tanh() + x);
            h = &kept.back();
        }
        std::vector<float> all;
        for (const Tensor& t : kept) {
            std::vector<float> v = t.to_vector<float>();
            all.insert(all.end(), v.begin(), v.end());
        }
        return all;
    }
};

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

// ---------------------------------------------------------------- configuration and ownership

TEST(config_starts_from_the_library_defaults) {
    ResidencyConfig c;
    CHECK(c.device == tr::Device::Simulated);
    CHECK(c.policy == Policy::Flow);
    CHECK_EQ(c.budget_bytes, uint64_t(0));
    CHECK_EQ(c.prefetch_depth, uint32_t(256));
    CHECK_EQ(c.pin_host_memory, true);
    CHECK_EQ(c.simulated_capacity, uint64_t(0));
    ResidencyConfig g(Policy::Genoa, 4096);
    CHECK(g.policy == Policy::Genoa && g.device == tr::Device::Simulated);
    tr_residency_config raw = g.to_c();
    CHECK_EQ(raw.policy, int32_t(TR_POLICY_GENOA));
    CHECK_EQ(raw.budget_bytes, uint64_t(4096));
    CHECK_EQ(ResidencyConfig(raw).budget_bytes, uint64_t(4096));
}

TEST(a_refused_config_throws_and_leaves_no_manager) {
    CHECK_THROWS(Residency(ResidencyConfig()), TR_ERR_INVALID_ARG, "budget");  // Flow, budget 0
    ResidencyConfig bad(Policy::Flow, 4096);
    bad.policy = static_cast<Policy>(42);
    CHECK_THROWS(Residency(bad), TR_ERR_INVALID_ARG, "policy");
    CHECK_THROWS(Residency::stats(), TR_ERR_INVALID_ARG, "no residency manager");
    Residency ok(ResidencyConfig(Policy::Flow, 4096));  // the failures released the ownership
    CHECK(ok.active());
}

TEST(one_residency_at_a_time_and_the_destructor_disables) {
    Stack s = Stack::make();
    std::vector<float> expected = s.pass();
    {
        Residency r(ResidencyConfig(Policy::Flow, Stack::smallest_budget));
        CHECK_THROWS(Residency(ResidencyConfig(Policy::Genoa, 1 << 20)), TR_ERR_INVALID_ARG, "already active");
        CHECK_EQ(Residency::stats().budget, Stack::smallest_budget);  // the second one changed nothing
        CHECK_EQ(s.pass(), expected);
    }
    CHECK_THROWS(Residency::stats(), TR_ERR_INVALID_ARG, "no residency manager");
    CHECK_THROWS(Residency::mark_iteration(), TR_ERR_INVALID_ARG, "");
    CHECK_THROWS(s.x.pin_resident(), TR_ERR_INVALID_ARG, "");
    CHECK_THROWS(s.x.is_resident(), TR_ERR_INVALID_ARG, "");
    CHECK_EQ(s.pass(), expected);
    Residency again(ResidencyConfig(Policy::Genoa, 1 << 20));
    again.disable();
    CHECK(!again.active());
    again.disable();  // a second disable does nothing
    CHECK_THROWS(Residency::stats(), TR_ERR_INVALID_ARG, "");
    CHECK_THROWS(again.set_callback([](const tr::Event&) {}), TR_ERR_INVALID_ARG, "disabled");
}

TEST(a_moved_residency_keeps_its_callback_and_the_moved_from_one_disables_nothing) {
    Tensor a = tr::randn({16, 16});
    uint64_t events = 0;
    std::optional<Residency> first;
    first.emplace(ResidencyConfig(Policy::Flow, 64 * KiB), [&](const tr::Event&) { events++; });
    Residency second(std::move(*first));
    CHECK(!first->active() && second.active());
    first.reset();  // the moved-from destructor
    Tensor b = a.matmul(a);
    CHECK(events > 0);  // the callback lives on the heap: moving did not move it
    CHECK_EQ(Residency::stats().ops, uint64_t(1));
}

// ---------------------------------------------------------------- guarantees

TEST(genoa_and_flow_equal_unmanaged_results_and_never_exceed_the_budget) {
    Stack s = Stack::make();
    std::vector<float> expected = s.pass();  // no manager
    REQUIRE(expected.size() == 6 * 48 * 32);
    for (Policy policy : {Policy::Genoa, Policy::Flow}) {
        for (uint64_t budget : {Stack::smallest_budget, 20 * KiB, 32 * KiB, 64 * KiB, uint64_t(1) << 20}) {
            const char* name = policy == Policy::Genoa ? "Genoa" : "Flow";
            Watch watch;
            watch.budget = budget;
            Residency r(ResidencyConfig(policy, budget), watch.callback());
            for (int pass = 0; pass < 3; pass++) {
                if (s.pass() != expected) {
                    harness::fail(__FILE__, __LINE__,
                                  std::string(name) + " at budget " + std::to_string(budget) +
                                      ": results differ from the unmanaged run in pass " + std::to_string(pass));
                }
                Residency::mark_iteration();
            }
            tr::ResidencyStats st = Residency::stats();
            r.disable();
            std::string what = std::string(name) + " at " + std::to_string(budget) + " B: ";
            if (watch.over_budget != 0 || watch.max_device_bytes > budget || st.peak_device_bytes > budget) {
                harness::fail(__FILE__, __LINE__,
                              what + std::to_string(watch.over_budget) + " events over budget, max " +
                                  std::to_string(watch.max_device_bytes) + ", peak " +
                                  std::to_string(st.peak_device_bytes));
            }
            CHECK(watch.events > 0 && watch.loads > 0);
            CHECK_EQ(watch.op_begins, watch.op_ends);
            CHECK_EQ(watch.unnamed_ops, uint64_t(0));
            CHECK_EQ(st.budget, budget);
            if (policy == Policy::Genoa) CHECK(st.write_backs >= 3 * 18);  // every result went home
            if (budget == Stack::smallest_budget) {
                // Six kept 6 KiB results cannot all stay: dirty ones were evicted and written back.
                if (st.evictions == 0 || st.write_backs == 0) harness::fail(__FILE__, __LINE__, what + "no eviction");
                CHECK_EQ(watch.max_device_bytes, budget);  // the largest op fills the budget exactly
                // From the second pass Flow follows the recorded iteration and prefetches.
                if (policy == Policy::Flow) CHECK(st.prefetches > 0 && st.prefetch_hits > 0);
            }
        }
    }
}

TEST(genoa_keeps_nothing_on_the_device_between_ops) {
    Tensor w = tr::randn({32, 32});
    Tensor x = tr::randn({8, 32});
    std::vector<uint64_t> at_op_end;
    Residency r(ResidencyConfig(Policy::Genoa, 1 << 20), [&](const tr::Event& e) {
        if (e.kind == tr::EventKind::OpEnd) at_op_end.push_back(e.device_bytes);
    });
    Tensor y = x.matmul(w).relu().matmul(w.transpose(0, 1));
    CHECK_EQ(at_op_end.size(), size_t(4));
    CHECK_EQ(at_op_end, std::vector<uint64_t>(at_op_end.size(), 0));
    CHECK_EQ(y.shape(), (std::vector<int64_t>{8, 32}));
}

TEST(releasing_a_handle_frees_its_device_bytes) {
    Residency r(ResidencyConfig(Policy::Flow, 1 << 20));
    {
        Tensor a = tr::randn({64, 64});
        Tensor b = a.matmul(a);  // a loaded, b made on the device: 32 KiB there
        CHECK(a.is_resident() && b.is_resident());
        CHECK_EQ(Residency::stats().device_bytes, 32 * KiB);
    }
    CHECK_EQ(Residency::stats().device_bytes, uint64_t(0));
}

TEST(a_budget_too_small_for_one_op_throws_naming_the_op_and_loses_nothing) {
    Tensor a = tr::randn({64, 64});  // 16 KiB each: a matmul needs 48 KiB at once
    Tensor b = tr::randn({64, 64});
    std::vector<float> expected = a.matmul(b).to_vector<float>();
    Residency r(ResidencyConfig(Policy::Flow, 20000));
    CHECK_THROWS(a.matmul(b), TR_ERR_BUDGET_TOO_SMALL, "`matmul` needs");
    CHECK_THROWS(a.matmul(b), TR_ERR_BUDGET_TOO_SMALL, "the budget is 20000 bytes");
    CHECK(Residency::stats().peak_device_bytes <= 20000);
    r.disable();
    CHECK_EQ(a.matmul(b).to_vector<float>(), expected);  // the inputs are intact
}

TEST(pins_count_against_the_budget_and_pinning_more_throws) {
    Tensor big = tr::randn({80, 64});     // 20 KiB
    Tensor pinned = tr::randn({32, 32});  // 4 KiB
    Tensor x = tr::randn({32, 32});
    Watch watch;
    watch.budget = 16 * KiB;
    Residency r(ResidencyConfig(Policy::Flow, watch.budget), watch.callback());
    CHECK_THROWS(big.pin_resident(), TR_ERR_BUDGET_TOO_SMALL, "pin_resident");
    CHECK(!big.is_resident());
    pinned.pin_resident();
    CHECK(pinned.is_resident());
    CHECK_EQ(Residency::stats().pinned_bytes, 4 * KiB);
    CHECK_THROWS(big.pin_resident(true), TR_ERR_BUDGET_TOO_SMALL, "");  // 4 + 20 > 16 KiB
    std::vector<Tensor> history;
    history.push_back(x + pinned);
    for (int i = 0; i < 12; i++) history.push_back(history.back().matmul(x).tanh() + pinned);
    tr::ResidencyStats st = Residency::stats();
    CHECK(st.evictions > 0 && st.write_backs > 0);
    CHECK(pinned.is_resident());  // never evicted
    CHECK_EQ(watch.over_budget, uint64_t(0));
    pinned.pin_resident(false);
    CHECK_EQ(Residency::stats().pinned_bytes, uint64_t(0));
    r.disable();
    Tensor expected = x + pinned;
    for (size_t i = 1; i < history.size(); i++) {
        expected = expected.matmul(x).tanh() + pinned;
        CHECK_EQ(history[i].to_vector<float>(), expected.to_vector<float>());
    }
}

// Losses of a seeded 16-64-1 MLP (dropout on the hidden layer) trained for 5 SGD steps.
static std::vector<double> train_mlp() {
    tr::manual_seed(5);
    Tensor x = tr::randn({128, 16});
    Tensor y = (x.narrow(1, 0, 1) * x.narrow(1, 1, 1)).tanh();
    std::vector<Tensor> params;  // Tensor is move-only: no initializer list
    params.push_back(tr::randn({16, 64}) * 0.25);
    params.push_back(tr::zeros({64}));
    params.push_back(tr::randn({64, 1}) * 0.125);
    params.push_back(tr::zeros({1}));
    for (Tensor& p : params) p.requires_grad_(true);
    std::vector<double> losses;
    for (int step = 0; step < 5; step++) {
        Tensor h = (x.matmul(params[0]) + params[1]).relu().dropout(0.2, true);
        Tensor loss = (h.matmul(params[2]) + params[3]).mse_loss(y);
        loss.backward();
        losses.push_back(loss.item());
        tr::optim_sgd_step(params, 0.05);
        for (Tensor& p : params) p.zero_grad();
    }
    return losses;
}

TEST(training_through_the_manager_gives_the_losses_of_training_without_it) {
    const std::vector<double> plain = train_mlp();
    CHECK(plain.back() < plain.front());
    for (Policy policy : {Policy::Resident, Policy::Genoa, Policy::Flow}) {
        for (Recompute recompute : {Recompute::Off, Recompute::Always}) {
            // The largest op holds a 32 KiB activation, a 256-byte weight and a 32 KiB result;
            // backward's largest node a 32 KiB saved activation, the 32 KiB gradient it receives
            // and the 32 KiB it makes (96.5 KiB in all).
            ResidencyConfig config(policy, 128 << 10);
            config.recompute = recompute;
            Residency r(config);
            CHECK(Residency::saved_tensors_managed());
            CHECK_EQ(train_mlp(), plain);
            const ResidencyStats stats = Residency::stats();
            if (policy != Policy::Resident) CHECK(stats.peak_device_bytes <= uint64_t(128 << 10));
            CHECK_EQ(stats.recomputations > 0, policy != Policy::Resident && recompute == Recompute::Always);
        }
    }
}

// ---------------------------------------------------------------- events and timeline

TEST(a_throwing_callback_never_reaches_the_library) {
    Tensor a = tr::randn({16, 16});
    std::vector<float> expected = a.matmul(a).to_vector<float>();
    int calls = 0;
    Residency r(ResidencyConfig(Policy::Flow, 64 * KiB), [&](const tr::Event&) {
        calls++;
        throw std::runtime_error("callback failed");
    });
    CHECK_EQ(a.matmul(a).to_vector<float>(), expected);  // the op went on
    CHECK_EQ(calls, 1);                                  // and the callback was not called again
    try {
        r.rethrow_callback_error();
        harness::fail(__FILE__, __LINE__, "rethrow_callback_error did not throw");
    } catch (const std::runtime_error& e) {
        CHECK_EQ(std::string(e.what()), std::string("callback failed"));
    }
    r.rethrow_callback_error();  // forgotten once thrown

    r.set_callback([&](const tr::Event&) { throw 42; });  // not even a std::exception
    Tensor b = a.matmul(a);
    try {
        r.rethrow_callback_error();
        harness::fail(__FILE__, __LINE__, "rethrow_callback_error did not throw");
    } catch (int v) {
        CHECK_EQ(v, 42);
    }

    int counted = 0;
    r.set_callback([&](const tr::Event&) { counted++; });
    Tensor c = a.matmul(a);
    CHECK(counted >= 2);  // op begin and end at least
    r.set_callback(nullptr);  // removed: nothing is called any more
    int before = counted;
    Tensor d = a.matmul(a);
    CHECK_EQ(counted, before);
}

TEST(a_callback_error_outlives_disable) {
    Tensor a = tr::randn({16, 16});
    Residency r(ResidencyConfig(Policy::Flow, 64 * KiB), [](const tr::Event&) { throw std::logic_error("late"); });
    Tensor b = a.matmul(a);
    r.disable();
    CHECK(!r.active());
    try {
        r.rethrow_callback_error();
        harness::fail(__FILE__, __LINE__, "rethrow_callback_error did not throw after disable");
    } catch (const std::logic_error& e) {
        CHECK_EQ(std::string(e.what()), std::string("late"));
    }
}

TEST(the_timeline_is_written_as_chrome_trace_json) {
    Tensor a = tr::randn({16, 16});
    auto path = std::filesystem::temp_directory_path() /
                ("tensorref-cpp-timeline-" +
                 std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ".json");
    Residency r(ResidencyConfig(Policy::Flow, 4096));
    CHECK_THROWS(Residency::timeline_write(path.string()), TR_ERR_INVALID_ARG, "no timeline");
    Residency::timeline_start();
    Tensor b = a.matmul(a).relu();
    Residency::timeline_write(path.string());
    std::string text = read_file(path);
    std::filesystem::remove(path);
    CHECK(text.rfind("{\"displayTimeUnit\"", 0) == 0);
    for (const char* needle : {"\"name\":\"matmul\"", "\"name\":\"relu\"", "\"name\":\"Load\"", "\"name\":\"device bytes\""}) {
        if (text.find(needle) == std::string::npos) harness::fail(__FILE__, __LINE__, std::string(needle) + " missing");
    }
    CHECK_THROWS(Residency::timeline_write("/nonexistent-dir/timeline.json"), TR_ERR_IO, "cannot write");
}

// tr::ResidencyStats is generated from the ABI manifest field by field: as many 64-bit fields as
// the C struct, each copied (a field the wrapper lacked, or copied from the wrong one, fails here).
static_assert(sizeof(tr::ResidencyStats) == sizeof(tr_residency_stats), "a field of tr_residency_stats is missing");

TEST(stats_copies_every_field) {
    constexpr size_t n = sizeof(tr_residency_stats) / sizeof(uint64_t);
    std::array<uint64_t, n> in{}, out{};
    for (size_t i = 0; i < n; i++) in[i] = 1000 + i;
    tr_residency_stats c{};
    std::memcpy(&c, in.data(), sizeof c);
    tr::ResidencyStats s(c);
    std::memcpy(out.data(), &s, sizeof s);
    CHECK_EQ(std::vector<uint64_t>(out.begin(), out.end()), std::vector<uint64_t>(in.begin(), in.end()));
    CHECK_EQ(s.reserved_bytes, c.reserved_bytes);
}

TEST(stats_since_subtracts_counters_and_keeps_gauges) {
    tr_residency_stats a{}, b{};
    a.budget = b.budget = 100;
    a.loads = 3, b.loads = 10;
    a.peak_device_bytes = 50, b.peak_device_bytes = 90;
    a.prefetch_hits = 1, b.prefetch_hits = 4;
    tr::ResidencyStats d = tr::ResidencyStats(b).since(tr::ResidencyStats(a));
    CHECK_EQ(d.loads, uint64_t(7));
    CHECK_EQ(d.prefetch_hits, uint64_t(3));
    CHECK_EQ(d.peak_device_bytes, uint64_t(90));
    CHECK_EQ(d.budget, uint64_t(100));
}

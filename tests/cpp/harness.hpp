// Tiny test harness for the C++ binding's tests (header only, no dependencies).
//
// TEST(name) { ... } defines and registers a test; the test files are separate translation units
// and all register into one list (an inline function's static), so this header is itself
// ODR-safe. CHECK / CHECK_EQ / CHECK_STATS / CHECK_THROWS record a failure and go on; REQUIRE
// leaves the test. run_all() runs every test and counts it as passed when none of its checks
// failed, it threw nothing unexpected, no tensor handle leaked (tr_live_handles() is back where
// it was) and no scope was left open; then it prints the closing line `N passed, N failed` and
// returns the exit code. The bookkeeping calls the C functions directly, never the binding, so
// it also works in a program whose binding refuses to run (abi_mismatch.cpp).
//
// KNOWN_BUG(name, "what") marks a test that shows a library bug not fixed yet (a strict expected
// failure): while it fails it is listed, not counted; once it passes it counts as failed, so that
// the marker is turned back into TEST.
#ifndef TENSORREF_TESTS_CPP_HARNESS_HPP
#define TENSORREF_TESTS_CPP_HARNESS_HPP

#include "tensorref.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <sstream>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

namespace harness {

struct Test {
    const char* name;
    const char* file;
    void (*fn)();
    const char* known_bug;  // nullptr for an ordinary test
};

inline std::vector<Test>& registry() {
    static std::vector<Test> tests;
    return tests;
}

struct Register {
    Register(const char* name, const char* file, void (*fn)(), const char* known_bug = nullptr) {
        registry().push_back({name, file, fn, known_bug});
    }
};

/// Failures in the running test.
inline int& failures() {
    static int n = 0;
    return n;
}

inline void fail(const char* file, int line, const std::string& what) {
    failures()++;
    std::fprintf(stderr, "%s:%d: %s\n", file, line, what.c_str());
}

/// Thrown by REQUIRE to leave the test.
struct Abort {};

template <class T>
std::string show(const T& v) {
    std::ostringstream out;
    if constexpr (std::is_same_v<T, bool>) {
        out << (v ? "true" : "false");
    } else if constexpr (std::is_enum_v<T>) {
        out << static_cast<long long>(v);
    } else if constexpr (std::is_arithmetic_v<T> || std::is_convertible_v<T, std::string>) {
        out.precision(17);
        out << v;
    } else {
        out << "{";
        const char* sep = "";
        for (const auto& e : v) {
            out << sep << show(e);
            sep = ", ";
        }
        out << "}";
    }
    return out.str();
}

/// a == b, except that two C strings are compared as text, not as pointers.
template <class A, class B>
bool equal(const A& a, const B& b) {
    if constexpr (std::is_convertible_v<const A&, const char*> && std::is_convertible_v<const B&, const char*>) {
        return std::string(a) == std::string(b);
    } else {
        return a == b;
    }
}

/// The spec's statistics tuple, read through the C ABI.
inline std::array<int64_t, 7> stats_tuple() {
    tr_stats s{};
    if (tr_scope_stats_get(&s) != TR_OK) return {-1, -1, -1, -1, -1, -1, -1};
    return {int64_t(s.created_outside_scope), int64_t(s.disposed_outside_scope), int64_t(s.created_in_scope),
            int64_t(s.disposed_in_scope),     int64_t(s.attached_to_scope),      int64_t(s.detached_from_scope),
            s.live};
}

inline int run_all() {
    int passed = 0, failed = 0;
    std::vector<const Test*> still_broken;
    for (const Test& t : registry()) {
        if (t.known_bug) std::fprintf(stderr, "-- %s: a known library bug; failures below are expected\n", t.name);
        failures() = 0;
        size_t live_before = tr_live_handles();
        tr_scope_stats_reset();
        try {
            t.fn();
        } catch (const Abort&) {
        } catch (const std::exception& e) {
            fail(t.file, 0, std::string("uncaught exception: ") + e.what());
        } catch (...) {
            fail(t.file, 0, "uncaught non-standard exception");
        }
        tr_scope open{0};
        if (tr_scope_current(&open) != TR_OK || open.id != 0) {
            fail(t.file, 0, "the test left a scope open; disposing it");
            while (tr_scope_current(&open) == TR_OK && open.id != 0) tr_scope_dispose(open);
        }
        size_t live_after = tr_live_handles();
        if (live_after != live_before) {
            fail(t.file, 0, "leak: " + std::to_string(live_before) + " live handles before, " +
                                std::to_string(live_after) + " after");
        }
        if (t.known_bug) {
            if (failures() == 0) {
                failed++;
                std::fprintf(stderr, "FAILED %s (%s): the known bug is fixed; make it a TEST\n", t.name, t.file);
            } else {
                still_broken.push_back(&t);
            }
        } else if (failures() == 0) {
            passed++;
        } else {
            failed++;
            std::fprintf(stderr, "FAILED %s (%s)\n", t.name, t.file);
        }
    }
    for (const Test* t : still_broken) {
        std::printf("known library bug, still present (not counted): %s: %s\n", t->name, t->known_bug);
    }
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 && passed > 0 ? 0 : 1;
}

}  // namespace harness

#define HARNESS_CAT2(a, b) a##b
#define HARNESS_CAT(a, b) HARNESS_CAT2(a, b)

#define TEST(name)                                                                                  \
    static void name();                                                                             \
    static const harness::Register HARNESS_CAT(register_, name)(#name, __FILE__, name);             \
    static void name()

#define KNOWN_BUG(name, what)                                                                       \
    static void name();                                                                             \
    static const harness::Register HARNESS_CAT(register_, name)(#name, __FILE__, name, what);       \
    static void name()

#define CHECK(cond)                                                                                 \
    do {                                                                                            \
        if (!(cond)) harness::fail(__FILE__, __LINE__, "CHECK failed: " #cond);                     \
    } while (0)

#define REQUIRE(cond)                                                                               \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            harness::fail(__FILE__, __LINE__, "REQUIRE failed: " #cond);                            \
            throw harness::Abort{};                                                                 \
        }                                                                                           \
    } while (0)

#define CHECK_EQ(actual, expected)                                                                  \
    do {                                                                                            \
        const auto& harness_a = (actual);                                                           \
        const auto& harness_e = (expected);                                                         \
        if (!harness::equal(harness_a, harness_e))                                                  \
            harness::fail(__FILE__, __LINE__,                                                       \
                          "CHECK_EQ failed: " #actual " is " + harness::show(harness_a) +           \
                              ", expected " + harness::show(harness_e));                            \
    } while (0)

/// The thread's statistics equal the spec's tuple (created_outside, disposed_outside,
/// created_in, disposed_in, attached, detached, live).
#define CHECK_STATS(co, dout, ci, di, at, de, live)                                                 \
    CHECK_EQ(harness::stats_tuple(), (std::array<int64_t, 7>{co, dout, ci, di, at, de, live}))

/// `expr` throws tr::Error with `want_status` and a message containing `want_needle` ("" skips
/// that).
#define CHECK_THROWS(expr, want_status, want_needle)                                                \
    do {                                                                                            \
        try {                                                                                       \
            (void)(expr);                                                                           \
            harness::fail(__FILE__, __LINE__, "CHECK_THROWS: " #expr " did not throw");             \
        } catch (const tr::Error& harness_err) {                                                    \
            if (harness_err.status() != (want_status))                                              \
                harness::fail(__FILE__, __LINE__,                                                   \
                              "CHECK_THROWS: " #expr " threw status " +                             \
                                  std::to_string(int(harness_err.status())) + ", expected " #want_status \
                                  " (" + harness_err.what() + ")");                                 \
            else if (std::string(harness_err.message()).find(want_needle) == std::string::npos)     \
                harness::fail(__FILE__, __LINE__,                                                   \
                              "CHECK_THROWS: message '" + harness_err.message() +                   \
                                  "' lacks '" + want_needle + "'");                                 \
        }                                                                                           \
    } while (0)

#endif  // TENSORREF_TESTS_CPP_HARNESS_HPP

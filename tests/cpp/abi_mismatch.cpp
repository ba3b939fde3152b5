// A program built against a header whose ABI version the library does not have.
//
// It redefines TR_ABI_VERSION before including tensorref.hpp, as if compiled with another
// release's header, and checks that the binding refuses before its first call into the library:
// tr::AbiMismatch on the first use and on every later one, with nothing created. It is a program of
// its own (one translation unit), since mixing two values of TR_ABI_VERSION in one program would
// break the one-definition rule.
#include "tensorref.h"
#undef TR_ABI_VERSION
#define TR_ABI_VERSION 9999
#include "tensorref.hpp"

#include "harness.hpp"

TEST(first_use_throws_abi_mismatch) {
    try {
        tr::Scope s;
        CHECK(!"opening a scope did not throw");
    } catch (const tr::AbiMismatch& e) {
        CHECK_EQ(e.header_abi(), uint32_t(9999));
        CHECK_EQ(e.library_abi(), tr_abi_version());
        CHECK(e.message().find("compiled with tensorref.h of ABI version 9999") != std::string::npos);
    }
    tr_scope current{0};
    CHECK(tr_scope_current(&current) == TR_OK && current.id == 0);  // nothing was opened
}

TEST(every_later_use_throws_too) {
    size_t live = tr_live_handles();
    for (int i = 0; i < 2; i++) {
        CHECK_THROWS(tr::ones({2}), TR_ERR_INVALID_ARG, "ABI mismatch");
        CHECK_THROWS(tr::live_handles(), TR_ERR_INVALID_ARG, "ABI mismatch");
    }
    CHECK_EQ(tr_live_handles(), live);
}

TEST(the_residency_manager_is_never_configured) {
    CHECK_THROWS(tr::ResidencyConfig(), TR_ERR_INVALID_ARG, "ABI mismatch");
    tr_residency_config raw{};
    CHECK(tr_residency_config_default(&raw) == TR_OK);
    raw.budget_bytes = 1 << 20;
    CHECK_THROWS(tr::Residency(tr::ResidencyConfig(raw)), TR_ERR_INVALID_ARG, "ABI mismatch");
    CHECK_THROWS(tr::Residency::stats(), TR_ERR_INVALID_ARG, "ABI mismatch");
    tr_residency_stats stats{};
    CHECK(tr_residency_stats_get(&stats) == TR_ERR_INVALID_ARG);  // no manager runs
}

int main() { return harness::run_all(); }

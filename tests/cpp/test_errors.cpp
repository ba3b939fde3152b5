// Errors and versions in the C++ binding.
//
// Every failing call throws tr::Error carrying the C status and the message tr_last_error had
// for that call; a failed call registers nothing; scope misuse is reported, never silent; the
// ABI check throws a clear AbiMismatch; the version functions agree with the header's macros.
#include "tensorref.hpp"

#include "harness.hpp"

#include <cstring>
#include <thread>

using tr::Scope;
using tr::Tensor;

TEST(error_carries_status_and_library_message) {
    Tensor a = tr::ones({2});
    Tensor b = tr::ones({3});
    try {
        Tensor c = a + b;
        CHECK(!"a + b with shapes [2] and [3] did not throw");
    } catch (const tr::Error& e) {
        CHECK_EQ(e.status(), TR_ERR_SHAPE);
        CHECK(e.message().find("size of tensor a (2)") != std::string::npos);
        CHECK_EQ(e.message(), tr::Error::last_message());  // what tr_last_error says right now
        std::string what = e.what();
        CHECK(what.find(e.message()) != std::string::npos);
        CHECK(what.find("status 400") != std::string::npos);
    }
}

TEST(error_is_a_std_exception) {
    bool caught = false;
    try {
        (void)tr::ones({2, 2}).item();
    } catch (const std::exception& e) {
        caught = std::strstr(e.what(), "one element") != nullptr;
    }
    CHECK(caught);
}

TEST(failed_ops_register_nothing) {
    Scope s;
    Tensor a = tr::ones({2, 3});
    size_t live = tr::live_handles();
    CHECK_THROWS(a.matmul(a), TR_ERR_SHAPE, "cannot be multiplied");
    CHECK_THROWS(a.view({5}), TR_ERR_SHAPE, "");
    CHECK_THROWS(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}), TR_ERR_SHAPE, "");
    CHECK_EQ(tr::live_handles(), live);
    CHECK_EQ(s.size(), size_t(1));
}

TEST(stale_and_invalid_handles) {
    Tensor t;
    {
        Scope s;
        t = tr::ones({2});
    }
    CHECK_THROWS(t + t, TR_ERR_STALE_HANDLE, "stale");
    CHECK_THROWS(t.numel(), TR_ERR_STALE_HANDLE, "");
    CHECK_THROWS(t.retain(), TR_ERR_STALE_HANDLE, "");
    Tensor empty;
    CHECK_THROWS(empty.shape(), TR_ERR_INVALID_HANDLE, "");
    CHECK(!empty.is_valid());
}

TEST(disposed_scope_rejects_mutations) {
    Tensor t = tr::ones({1});
    Scope s;
    Scope target;
    target.dispose();
    s.attach(t);
    CHECK_THROWS(t.move_to_scope(target), TR_ERR_SCOPE_DISPOSED, "");
    CHECK(t.scope() == s);  // nothing changed
    s.dispose();
    CHECK(!t.is_valid());
    Tensor u = tr::ones({1});
    CHECK_THROWS(s.attach(u), TR_ERR_SCOPE_DISPOSED, "disposed");
    CHECK_THROWS(s.dispose_everything(), TR_ERR_SCOPE_DISPOSED, "");
    CHECK_THROWS(s.size(), TR_ERR_SCOPE_DISPOSED, "");
    s.dispose();  // a second dispose is a no-op, not an error
    CHECK(!u.scope());
}

TEST(binding_errors_use_the_same_type) {
    Tensor f = tr::ones({2});
    CHECK_THROWS(f.to_vector<double>(), TR_ERR_DTYPE, "f32");
}

TEST(last_error_is_per_thread) {
    CHECK_THROWS(tr::ones({2}).item(), TR_ERR_SHAPE, "");
    std::string mine = tr::Error::last_message();
    std::thread([] {
        try {
            (void)tr::ones({3}).view({7});
        } catch (const tr::Error&) {
        }
    }).join();
    CHECK_EQ(tr::Error::last_message(), mine);
}

TEST(abi_check_and_versions) {
    CHECK_EQ(tr::abi_version(), uint32_t(TR_ABI_VERSION));
    tr::check_abi_version();  // the header this test was built with matches: no throw
    try {
        tr::check_abi_version(TR_ABI_VERSION + 1);
        CHECK(!"a wrong header ABI version did not throw");
    } catch (const tr::AbiMismatch& e) {
        CHECK_EQ(e.header_abi(), uint32_t(TR_ABI_VERSION + 1));
        CHECK_EQ(e.library_abi(), uint32_t(TR_ABI_VERSION));
        CHECK_EQ(e.status(), TR_ERR_INVALID_ARG);
        CHECK(e.message().find("ABI mismatch") != std::string::npos);
        CHECK(e.message().find(std::to_string(TR_ABI_VERSION + 1)) != std::string::npos);
    }
    std::string expected = "libtensorref " + std::to_string(TR_VERSION_MAJOR) + "." +
                           std::to_string(TR_VERSION_MINOR) + "." + std::to_string(TR_VERSION_PATCH);
    CHECK_EQ(tr::version().rfind(expected + " ", 0), size_t(0));
}

// A failing op with a scalar operand reports libtorch's error like any op. (Until bd9f1e1 it
// panicked inside tch 0.24, whose `Scalar` temporary unwrapped libtorch's pending error when
// dropped, and the caller got TR_ERR_PANIC.)
TEST(failing_scalar_op_reports_torch_error_not_panic) {
    Tensor w = tr::ones({2}).requires_grad_(true);
    CHECK_THROWS(w.mul_(tr::ones({2})), TR_ERR_TORCH, "leaf Variable");
    CHECK_THROWS(w.mul_scalar_(2.0), TR_ERR_TORCH, "leaf Variable");
    Tensor b = Tensor::from_vector(std::vector<bool>{true, false});
    CHECK_THROWS(b.sub_scalar(1.0), TR_ERR_DTYPE, "Subtraction");  // bool arithmetic: a dtype error
    Tensor i = Tensor::from_vector(std::vector<int64_t>{1, 2});
    CHECK_THROWS(i.mul_scalar_(0.5), TR_ERR_DTYPE, "can't be cast");  // a float result into i64
}

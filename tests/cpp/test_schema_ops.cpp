// Ops generated from libtorch's schema, through the C++ wrappers, written as a user writes
// them: optional arguments as std::nullopt or a value, strings, dtypes, a tuple taken apart with
// a structured binding, a list longer than the wrapper's first buffer, an in-place op, an error,
// and nothing left behind. Values are chosen so that float32 results are exact.
#include "tensorref.hpp"

#include "harness.hpp"

using tr::Tensor;
using F = std::vector<float>;
using I = std::vector<int64_t>;

namespace {

Tensor f32(F values, tr::IntList shape) { return Tensor::from_vector(values, shape); }

}  // namespace

TEST(schema_ops_take_optional_arguments_strings_and_dtypes) {
    Tensor x = f32({1, -2, 3, -4, 5, -6}, {2, 3});
    CHECK_EQ(x.clamp_min(0).to_vector<float>(), (F{1, 0, 3, 0, 5, 0}));
    CHECK_EQ(x.cumsum(1, tr::DType::F64).to_vector<double>(), (std::vector<double>{1, -1, 2, -4, 1, -5}));
    CHECK_EQ(x.cumsum(1, std::nullopt).to_vector<float>(), (F{1, -1, 2, -4, 1, -5}));
    CHECK_EQ(x.sum_dim_intlist(tr::IntList{1}, false, std::nullopt).to_vector<float>(), (F{2, -5}));
    CHECK_EQ(x.sum_dim_intlist(std::nullopt, false, std::nullopt).to_vector<float>(), (F{-3}));
    Tensor y = f32({7, -7, 5, 6, 1, 2}, {2, 3});
    Tensor two = f32({2, 2, 2, 2, 2, 2}, {2, 3});
    CHECK_EQ(y.div_tensor_mode(two, "floor").to_vector<float>(), (F{3, -4, 2, 3, 0, 1}));
    CHECK_EQ(y.div_tensor_mode(two, std::nullopt).to_vector<float>(), (F{3.5f, -3.5f, 2.5f, 3, 0.5f, 1}));
    CHECK_EQ(tr::einsum("ij->ji", {x}, std::nullopt).shape(), (I{3, 2}));
    CHECK_EQ(x.size_int(1), 3);
    CHECK(x.is_floating_point());
    CHECK(x.result_type_scalar(2) == tr::DType::F32);
    CHECK(tr::promote_types(tr::DType::I64, tr::DType::F16) == tr::DType::F16);
}

TEST(schema_ops_return_tuples_and_lists) {
    Tensor x = f32({3, 1, 2, 9, 7, 8}, {2, 3});
    auto [values, indices] = x.topk(2, 1, true, true);
    CHECK_EQ(values.to_vector<float>(), (F{3, 2, 9, 8}));
    CHECK_EQ(indices.to_vector<int64_t>(), (I{0, 2, 0, 2}));
    std::vector<Tensor> rows = tr::arange(0, 200, 1, tr::DType::F32).reshape({100, 2}).unbind_int(0);
    CHECK_EQ(rows.size(), size_t{100});  // more than the first buffer of 64: made again with room
    CHECK_EQ(rows[99].to_vector<float>(), (F{198, 199}));
    CHECK_EQ(x.split_tensor(2, 1).size(), size_t{2});
}

TEST(schema_ops_in_place_errors_and_no_leftovers) {
    size_t live = tr::live_handles();
    {
        Tensor x = f32({1, -2, 3, -4}, {4});
        x.clamp_min_(0);
        CHECK_EQ(x.to_vector<float>(), (F{1, 0, 3, 0}));
        CHECK_THROWS(x.div_tensor_mode(x, "sideways"), TR_ERR_TORCH, "rounding_mode");
        CHECK_THROWS(f32({1, 2, 3, 4}, {1, 1, 2, 2}).avg_pool2d({2, 2, 2}, {}, {0}, false, true, std::nullopt),
                     TR_ERR_TORCH, "expected 2 values");
        for (int i = 0; i < 3; i++) {
            auto [v, ix] = x.topk(1, 0, true, true);
            (void)x.split_tensor(1, 0);
        }
    }
    CHECK_EQ(tr::live_handles(), live);
}

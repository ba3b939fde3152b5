// The arithmetic operators and a sample of the generated op wrappers, checked numerically.
//
// Values are chosen so that float32 results are exact, so CHECK_EQ compares them bit for bit;
// each test would fail on a wrong operator mapping (a swapped operand, sub for add, a lost
// broadcast), a wrong dtype, or an in-place op that allocated a new handle.
#include "tensorref.hpp"

#include "harness.hpp"

using tr::Tensor;
using F = std::vector<float>;

namespace {

Tensor f32(F values) { return Tensor::from_vector(values); }

}  // namespace

TEST(binary_operators_on_tensors) {
    Tensor a = f32({1, 2, 3, 4});
    Tensor b = f32({8, 4, 2, 1});
    CHECK_EQ((a + b).to_vector<float>(), (F{9, 6, 5, 5}));
    CHECK_EQ((a - b).to_vector<float>(), (F{-7, -2, 1, 3}));
    CHECK_EQ((a * b).to_vector<float>(), (F{8, 8, 6, 4}));
    CHECK_EQ((a / b).to_vector<float>(), (F{0.125f, 0.5f, 1.5f, 4}));
    CHECK_EQ((-a).to_vector<float>(), (F{-1, -2, -3, -4}));
    CHECK_EQ((a + b * a).to_vector<float>(), (F{9, 10, 9, 8}));  // C++ precedence carries over
}

TEST(operators_with_doubles_on_either_side) {
    Tensor a = f32({1, 2, 4, 8});
    CHECK_EQ((a + 0.5).to_vector<float>(), (F{1.5f, 2.5f, 4.5f, 8.5f}));
    CHECK_EQ((0.5 + a).to_vector<float>(), (F{1.5f, 2.5f, 4.5f, 8.5f}));
    CHECK_EQ((a - 1.0).to_vector<float>(), (F{0, 1, 3, 7}));
    CHECK_EQ((1.0 - a).to_vector<float>(), (F{0, -1, -3, -7}));
    CHECK_EQ((a * 3.0).to_vector<float>(), (F{3, 6, 12, 24}));
    CHECK_EQ((3.0 * a).to_vector<float>(), (F{3, 6, 12, 24}));
    CHECK_EQ((a / 4.0).to_vector<float>(), (F{0.25f, 0.5f, 1, 2}));
    CHECK_EQ((4.0 / a).to_vector<float>(), (F{4, 2, 1, 0.5f}));
    CHECK_EQ(a.to_vector<float>(), (F{1, 2, 4, 8}));  // no operator touched its operand
}

TEST(division_is_true_division) {
    auto values = [](const Tensor& t) { return t.to_dtype(tr::DType::F64).to_vector<double>(); };
    Tensor i = Tensor::from_vector(std::vector<int64_t>{1, 2, 3});
    CHECK_EQ(values(i / 2.0), (std::vector<double>{0.5, 1, 1.5}));
    CHECK_EQ(values(3.0 / i), (std::vector<double>{3, 1.5, 1}));
    CHECK_EQ(values(i / Tensor::from_vector(std::vector<int64_t>{2, 4, 4})), (std::vector<double>{0.5, 0.5, 0.75}));
    Tensor d = Tensor::from_vector(std::vector<double>{1, 3});
    CHECK((1.0 / d).dtype() == tr::DType::F64);
    CHECK_EQ((1.0 / d).to_vector<double>(), (std::vector<double>{1, 1.0 / 3.0}));
}

// A double operand promotes an integer or bool tensor as a Python float does in PyTorch: to the
// default dtype, float32 (src/ops/scalars.rs types the 0-dim scalar tensor for this).
TEST(double_operands_promote_like_python_scalars) {
    auto dtype = [](const Tensor& t) { return std::string(tr::to_string(t.dtype())); };
    Tensor i = Tensor::from_vector(std::vector<int64_t>{1, 2});
    Tensor b = Tensor::from_vector(std::vector<bool>{true, false});
    CHECK_EQ(dtype(i * 0.5), "f32");
    CHECK_EQ(dtype(i + 1.5), "f32");
    CHECK_EQ(dtype(i - 0.5), "f32");
    CHECK_EQ(dtype(i / 2.0), "f32");
    CHECK_EQ(dtype(i * 2.0), "f32");  // a whole-valued double is still a float
    CHECK_EQ(dtype(b * 2.0), "f32");
    CHECK_EQ(dtype(3.0 / i), "f32");
}

// What does hold: a double operand never widens a floating tensor's dtype.
TEST(double_operands_keep_a_floating_dtype) {
    auto dtype = [](const Tensor& t) { return std::string(tr::to_string(t.dtype())); };
    Tensor f = Tensor::from_vector(std::vector<float>{1, 2});
    Tensor h = f.to_dtype(tr::DType::F16);
    CHECK_EQ(dtype(f * 0.1), "f32");
    CHECK_EQ(dtype(f / 3.0), "f32");
    CHECK_EQ(dtype(2.0 - f), "f32");
    CHECK_EQ(dtype(h * 0.5), "f16");
    CHECK_EQ(dtype(h + 1.0), "f16");
}

TEST(operators_broadcast) {
    Tensor col = Tensor::from_vector(F{1, 2}, {2, 1});
    Tensor row = f32({10, 20, 30});
    Tensor sum = col + row;
    CHECK_EQ(sum.shape(), (std::vector<int64_t>{2, 3}));
    CHECK_EQ(sum.to_vector<float>(), (F{11, 21, 31, 12, 22, 32}));
}

TEST(compound_assignment_is_in_place_on_the_same_handle) {
    Tensor a = f32({1, 2, 3});
    Tensor view = a.alias();
    uint64_t id = a.raw().id;
    size_t live = tr::live_handles();
    a += f32({1, 1, 1});
    a -= f32({0, 1, 2});
    a *= f32({2, 2, 2});
    a *= 0.5;
    CHECK_EQ(a.raw().id, id);
    CHECK_EQ(tr::live_handles(), live);  // the right-hand temporaries are gone, nothing new stays
    CHECK_EQ(a.to_vector<float>(), (F{2, 2, 2}));
    CHECK_EQ(view.to_vector<float>(), (F{2, 2, 2}));  // same storage
}

// % is Python's (and PyTorch's remainder): the result takes the divisor's sign.
TEST(remainder_operators_take_the_divisors_sign) {
    Tensor a = f32({7, -7, 5.5f, 2});
    Tensor b = f32({2, 2, -2, 4});
    CHECK_EQ((a % b).to_vector<float>(), (F{1, 1, -0.5f, 2}));
    CHECK_EQ((a % 2.0).to_vector<float>(), (F{1, 1, 1.5f, 0}));
    CHECK_EQ((5.0 % f32({2, 3, -4})).to_vector<float>(), (F{1, 2, -3}));
    Tensor ints = Tensor::from_vector(std::vector<int64_t>{7, -7, 9});
    CHECK((ints % 4).dtype() == tr::DType::I64);  // an integer scalar keeps the integer dtype
    CHECK_EQ((ints % 4).to_vector<int64_t>(), (std::vector<int64_t>{3, 1, 1}));
    CHECK_EQ((2 * ints + 1).to_vector<int64_t>(), (std::vector<int64_t>{15, -13, 19}));
}

TEST(every_compound_assignment_writes_through_a_shared_storage) {
    Tensor w = f32({8, 6, 4});
    Tensor shared = w.alias();  // another handle, same storage
    size_t live = tr::live_handles();
    w /= f32({2, 2, 2});
    w %= 3.0;
    CHECK_EQ(shared.to_vector<float>(), (F{1, 0, 2}));
    w += 1;
    w -= 0.5;
    w %= f32({2, 2, 2});
    CHECK_EQ(shared.to_vector<float>(), (F{1.5f, 0.5f, 0.5f}));
    CHECK_EQ(tr::live_handles(), live);
    Tensor& same = (w *= 2);  // returns the left-hand tensor itself
    CHECK(&same == &w);
    Tensor ints = Tensor::from_vector(std::vector<int64_t>{1, 2});
    CHECK_THROWS(ints %= 0.5, TR_ERR_DTYPE, "can't be cast");  // a float remainder into i64
}

TEST(operators_register_results_in_the_current_scope) {
    Tensor a = f32({1, 2});
    tr::Scope s;
    Tensor b = 2.0 / a;  // one op: rdiv_scalar
    CHECK(b.scope() == s);
    CHECK_EQ(s.size(), size_t(1));
    CHECK_STATS(1, 0, 1, 0, 0, 0, 2);
}

TEST(generated_members_and_free_functions_agree) {
    tr::manual_seed(7);
    Tensor x = tr::randn({4, 3});
    Tensor w = tr::randn({2, 3});
    Tensor b = f32({0.5f, -0.5f});
    CHECK_EQ(x.matmul(w.transpose(0, 1)).to_vector<float>(),
             tr::matmul(x, tr::transpose(w, 0, 1)).to_vector<float>());
    CHECK_EQ(tr::linear(x, w, b).to_vector<float>(), (x.matmul(w.transpose(0, 1)) + b).to_vector<float>());
    CHECK_EQ(x.linear(w, std::nullopt).to_vector<float>(), x.matmul(w.transpose(0, 1)).to_vector<float>());
    CHECK_EQ(tr::relu(x - 0.25).to_vector<float>(), (x - 0.25).relu().to_vector<float>());
}

TEST(list_parameters_take_braces_and_vectors) {
    Tensor a = f32({1, 2});
    Tensor b = f32({3, 4});
    CHECK_EQ(tr::cat({a, b}, 0).to_vector<float>(), (F{1, 2, 3, 4}));
    CHECK_EQ(tr::cat({a, b * 2.0, f32({9})}, 0).to_vector<float>(), (F{1, 2, 6, 8, 9}));  // temporaries
    std::vector<std::reference_wrapper<const Tensor>> refs{b, a};
    CHECK_EQ(tr::cat(refs, 0).to_vector<float>(), (F{3, 4, 1, 2}));
    std::vector<Tensor> parts;
    parts.push_back(f32({5}));
    parts.push_back(f32({6}));
    Tensor stacked = tr::stack(parts, 0);
    CHECK_EQ(stacked.shape(), (std::vector<int64_t>{2, 1}));
    Tensor m = Tensor::from_vector(F{1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK_EQ(m.sum_dim({1}, false).to_vector<float>(), (F{6, 15}));
    std::vector<int64_t> dims{0};
    CHECK_EQ(m.sum_dim(dims, true).shape(), (std::vector<int64_t>{1, 3}));
    CHECK_EQ(m.reshape({3, -1}).shape(), (std::vector<int64_t>{3, 2}));
    CHECK_EQ(tr::zeros({}).shape(), (std::vector<int64_t>{}));  // an empty list is a scalar shape
    CHECK_EQ(m.permute({1, 0}).contiguous().to_vector<float>(), (F{1, 4, 2, 5, 3, 6}));
    CHECK_EQ(tr::zeros({2, 3, 4, 5, 6, 7, 8, 9, 10}).numel(), size_t(3628800));  // > 8 dims, off the inline buffer
}

TEST(value_and_bool_returning_ops) {
    Tensor m = Tensor::from_vector(F{3, 9, 1, 4}, {2, 2});
    Tensor idx = m.argmax(1, false);
    CHECK(idx.dtype() == tr::DType::I64);
    CHECK_EQ(idx.to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
    CHECK_EQ(m.max().item(), 9.0);
    CHECK_EQ(m.gt(tr::full({2, 2}, 3.5)).to_vector<bool>(), (std::vector<bool>{false, true, false, true}));
    CHECK(!m.requires_grad());
    CHECK_EQ(tr::arange(0, 4, 1, tr::DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
    CHECK(tr::eye(3).dtype() == tr::DType::F32);  // a trailing dtype defaults to float32
}

TEST(gradients_through_the_binding) {
    Tensor w = f32({1, 2, 3}).requires_grad_(true);
    CHECK(!w.grad().has_value());  // none before any backward
    Tensor loss = (w * w).sum();
    loss.backward();
    std::optional<Tensor> g = w.grad();
    REQUIRE(g.has_value());
    CHECK_EQ(g->to_vector<float>(), (F{2, 4, 6}));
    tr::optim_sgd_step({w}, 0.5);
    CHECK_EQ(w.detach().to_vector<float>(), (F{0, 0, 0}));
    w.zero_grad();
    CHECK_EQ(w.grad()->to_vector<float>(), (F{0, 0, 0}));
    w.clear_grad();
    CHECK(!w.grad().has_value());  // dropped, as torch's zero_grad(set_to_none=True)
    (w * w).sum().backward();
    CHECK_EQ(w.grad()->to_vector<float>(), (F{0, 0, 0}));  // made anew: 2w at w = 0
}

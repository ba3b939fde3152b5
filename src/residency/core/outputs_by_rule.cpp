// The bytes of the outputs of ops that libtorch's C++ has no meta kernel for (outputs.cpp asks
// the meta kernel of any other op). PyTorch writes theirs in Python (torch/_meta_registrations.py,
// torch/_decomp): a C, C++, C# or Rust program has none to ask, and in a Python process each costs
// about 100 us a new signature. Among them are the ops of attention (CUDA's flash, efficient and
// cuDNN kernels, the CPU's flash kernel), convolution, the fused cells of LSTM and GRU, and the
// ops of training (the backward of embedding, layer_norm and convolution, dropout): a rule here
// says what PyTorch's meta kernel says, from the arguments' sizes and dtypes, and answers first,
// so that every process reserves the same. A kernel that allocates more than its meta kernel
// says (flash attention pads a head size that is not a multiple of 8 on CUDA) has the rest
// counted unreserved.
#include "outputs_by_rule.h"

#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtils.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

namespace tr_native {

namespace {

using Args = c10::ArrayRef<c10::IValue>; // an op's arguments, in its schema's order

const at::Tensor &tensor(Args a, size_t i) { return a[i].toTensor(); }

bool given(Args a, size_t i) { return !a[i].isNone() && a[i].toTensor().defined(); }

uint64_t bytes(int64_t elements, at::ScalarType dtype) { return static_cast<uint64_t>(elements) * c10::elementSize(dtype); }

// A new tensor with as many elements as `t` (`empty_like`, `zeros_like`), in `t`'s dtype or `dtype`.
uint64_t like(const at::Tensor &t) { return bytes(t.numel(), t.scalar_type()); }
uint64_t like(const at::Tensor &t, at::ScalarType dtype) { return bytes(t.numel(), dtype); }

// The elements left of `t` reduced over the dims `dims` (over all where none are given).
int64_t reduced(const at::Tensor &t, const c10::IValue &dims) {
    if (dims.isNone() || dims.toIntList().empty()) {
        return 1;
    }
    std::vector<bool> gone(std::max<int64_t>(t.dim(), 1), false);
    for (const int64_t d : dims.toIntList()) {
        gone[at::maybe_wrap_dim(d, t.dim())] = true;
    }
    int64_t left = 1;
    for (int64_t d = 0; d < t.dim(); ++d) {
        left *= gone[d] ? 1 : t.size(d);
    }
    return left;
}

// Scaled dot-product attention: query [B, H, L, E], key [B, H, S, E], value [B, H, S, Ev]; each
// kernel's output, its log-sum-exp (f32), and its random seed and offset (on CUDA's device unless
// it draws: flash attention's are uint64 [2] and [], the others' int64 [] each).
constexpr uint64_t kFlashSeeds = 3 * 8;
constexpr uint64_t kSeeds = 2 * 8;

// _scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, return_debug_mask)
uint64_t flash(Args a) {
    const at::Tensor &q = tensor(a, 0);
    const int64_t B = q.size(0), H = q.size(1), L = q.size(2), E = q.size(3), S = tensor(a, 1).size(2);
    uint64_t n = like(q) + bytes(B * H * L, at::kFloat) + kFlashSeeds;
    if (a[5].toBool()) { // the debug mask, as wide as the meta kernel makes it
        const int64_t block = E > 64 ? 128 : 256;
        const int64_t width = S <= 128 ? 128 : S <= 256 ? 256 : (L + block - 1) / block;
        n += bytes(B * H * L * width, q.scalar_type());
    }
    return n;
}

// _scaled_dot_product_efficient_attention(query, key, value, attn_bias, compute_log_sumexp, ...):
// the log-sum-exp's rows are padded to 32.
uint64_t efficient(Args a) {
    const at::Tensor &q = tensor(a, 0);
    const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Ev = tensor(a, 2).size(-1);
    const uint64_t logsumexp = a[4].toBool() ? bytes(B * H * ((L + 31) / 32 * 32), at::kFloat) : 0;
    return bytes(B * H * L * Ev, q.scalar_type()) + logsumexp + kSeeds;
}

// _scaled_dot_product_efficient_attention_backward(grad_out, query, key, value, attn_bias, out,
// logsumexp, philox_seed, philox_offset, dropout_p, grad_input_mask, ...): the bias's gradient
// where asked, its last dim padded to 16.
uint64_t efficient_backward(Args a) {
    const at::Tensor &q = tensor(a, 1), &k = tensor(a, 2), &v = tensor(a, 3);
    const int64_t B = q.size(0), H = q.size(1), L = q.size(2), E = q.size(3), S = k.size(2), Ev = v.size(3);
    uint64_t n = bytes(B * H * L * E, q.scalar_type()) + bytes(B * H * S * E, k.scalar_type()) +
                 bytes(B * H * S * Ev, v.scalar_type());
    if (given(a, 4) && a[10].toBoolList().get(3)) {
        const at::Tensor &bias = tensor(a, 4);
        const int64_t last = bias.size(-1);
        n += bytes(bias.numel() / std::max<int64_t>(last, 1) * ((last + 15) / 16 * 16), bias.scalar_type());
    }
    return n;
}

// _scaled_dot_product_cudnn_attention(query, key, value, ...)
uint64_t cudnn(Args a) {
    const at::Tensor &q = tensor(a, 0);
    const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Ev = tensor(a, 2).size(-1);
    return bytes(B * H * L * Ev, q.scalar_type()) + bytes(B * H * L, at::kFloat) + kSeeds;
}

// _scaled_dot_product_flash_attention_for_cpu(query, key, value, ...)
uint64_t flash_for_cpu(Args a) {
    const at::Tensor &q = tensor(a, 0);
    return like(q) + bytes(q.size(0) * q.size(1) * q.size(2), at::kFloat);
}

// The backward of flash (CUDA's and the CPU's) and cuDNN attention (grad_out, query, key, value, ...):
// a gradient like each of query, key and value.
uint64_t attention_backward(Args a) { return like(tensor(a, 1)) + like(tensor(a, 2)) + like(tensor(a, 3)); }

// convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
// input [N, C, spatial...], weight [C_out, C / groups, kernel...] (transposed: [C, C_out / groups,
// kernel...]); a list of one value holds for every spatial dim.
uint64_t convolution(Args a) {
    const at::Tensor &input = tensor(a, 0), &weight = tensor(a, 1);
    const bool transposed = a[6].toBool();
    const auto nth = [&](size_t arg, int64_t d) {
        const auto list = a[arg].toIntList();
        return list.get(list.size() == 1 ? 0 : d);
    };
    int64_t elements = input.size(0) * (transposed ? weight.size(1) * a[8].toInt() : weight.size(0));
    for (int64_t d = 0; d + 2 < input.dim(); ++d) {
        const int64_t in = input.size(d + 2), k = weight.size(d + 2), stride = nth(3, d), pad = nth(4, d), dil = nth(5, d);
        elements *= transposed ? (in - 1) * stride - 2 * pad + dil * (k - 1) + nth(7, d) + 1
                               : (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    }
    return bytes(elements, input.scalar_type());
}

// convolution_backward(grad_output, input, weight, bias_sizes, ..., output_mask)
uint64_t convolution_backward(Args a) {
    const auto mask = a[10].toBoolList();
    const bool bias = mask.get(2) && !a[3].isNone();
    return (mask.get(0) ? like(tensor(a, 1)) : 0) + (mask.get(1) ? like(tensor(a, 2)) : 0) +
           (bias ? bytes(c10::multiply_integers(a[3].toIntList().vec()), tensor(a, 0).scalar_type()) : 0);
}

// embedding_dense_backward(grad_output, indices, num_weights, ...): the weight's gradient.
uint64_t embedding_backward(Args a) {
    const at::Tensor &grad = tensor(a, 0);
    return bytes(a[2].toInt() * grad.size(-1), grad.scalar_type());
}

// native_dropout(input, p, train): the output and its mask.
uint64_t dropout(Args a) { return like(tensor(a, 0)) + like(tensor(a, 0), at::kBool); }

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
uint64_t layer_norm_backward(Args a) {
    const auto mask = a[7].toBoolList();
    return (mask.get(0) ? like(tensor(a, 1)) : 0) + (mask.get(1) && given(a, 5) ? like(tensor(a, 5)) : 0) +
           (mask.get(2) && given(a, 6) ? like(tensor(a, 6)) : 0);
}

// index_select(self, dim, index)
uint64_t index_select(Args a) {
    const at::Tensor &self = tensor(a, 0);
    if (self.dim() == 0) {
        return like(self);
    }
    std::vector<int64_t> sizes = self.sizes().vec();
    sizes[at::maybe_wrap_dim(a[1].toInt(), self.dim())] = tensor(a, 2).numel();
    return bytes(c10::multiply_integers(sizes), self.scalar_type());
}

// floor_divide(self, other): pointwise, though not tagged so.
uint64_t floor_divide(Args a) {
    const at::Tensor &self = tensor(a, 0), &other = tensor(a, 1);
    return bytes(c10::multiply_integers(at::infer_size(self.sizes(), other.sizes())), at::result_type(self, other));
}

// var, std (self, dim, correction, keepdim): real for a complex input; with the mean beside it.
uint64_t spread(Args a) {
    const at::Tensor &self = tensor(a, 0);
    return bytes(reduced(self, a[1]), c10::toRealValueType(self.scalar_type()));
}
uint64_t spread_and_mean(Args a) { return spread(a) + bytes(reduced(tensor(a, 0), a[1]), tensor(a, 0).scalar_type()); }

// mse_loss_backward(grad_output, self, target, reduction)
uint64_t mse_loss_backward(Args a) { return like(tensor(a, 1)); }

// max(self), min(self): one element.
uint64_t extreme(Args a) { return bytes(1, tensor(a, 0).scalar_type()); }

// histc(self, bins, min, max)
uint64_t histc(Args a) { return bytes(a[1].toInt(), tensor(a, 0).scalar_type()); }

// The fused cells of LSTM and GRU layers (CUDA's kernels): the gates [B, 4H] or [B, 3H] from the
// input and from the hidden state, and the cell or hidden state [B, H].
// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias, hidden_bias): hy, cy, and a
// workspace of the gates.
uint64_t lstm_cell(Args a) { return 2 * like(tensor(a, 2)) + like(tensor(a, 0)); }
// _thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias): the gates'
// gradient, cx's, and the bias's (summed over the batch); none without a gradient to take back.
uint64_t lstm_cell_backward(Args a) {
    if (!given(a, 0) && !given(a, 1)) {
        return 0;
    }
    const at::Tensor &workspace = tensor(a, 4);
    return like(workspace) + like(tensor(a, 2)) + (a[5].toBool() ? bytes(workspace.size(1), workspace.scalar_type()) : 0);
}
// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias, hidden_bias): hy, and a
// workspace of five [B, H] parts.
uint64_t gru_cell(Args a) { return 6 * like(tensor(a, 2)); }
// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias): the gradients of the input's and
// the hidden state's gates, hx's, and the two biases'.
uint64_t gru_cell_backward(Args a) {
    const at::Tensor &grad = tensor(a, 0);
    const int64_t gates = 3 * grad.size(1);
    return 2 * bytes(grad.size(0) * gates, grad.scalar_type()) + like(grad) +
           (a[2].toBool() ? 2 * bytes(gates, grad.scalar_type()) : 0);
}

using Rule = uint64_t (*)(Args);

// By operator name and overload ("aten::var.correction").
const std::unordered_map<std::string, Rule> &rules() {
    static const auto *by_name = new std::unordered_map<std::string, Rule>{ // lives for the process
        {"aten::_scaled_dot_product_flash_attention", flash},
        {"aten::_scaled_dot_product_flash_attention_backward", attention_backward},
        {"aten::_scaled_dot_product_efficient_attention", efficient},
        {"aten::_scaled_dot_product_efficient_attention_backward", efficient_backward},
        {"aten::_scaled_dot_product_cudnn_attention", cudnn},
        {"aten::_scaled_dot_product_cudnn_attention_backward", attention_backward},
        {"aten::_scaled_dot_product_flash_attention_for_cpu", flash_for_cpu},
        {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", attention_backward},
        {"aten::convolution", convolution},
        {"aten::convolution_backward", convolution_backward},
        {"aten::embedding_dense_backward", embedding_backward},
        {"aten::native_dropout", dropout},
        {"aten::native_layer_norm_backward", layer_norm_backward},
        {"aten::index_select", index_select},
        {"aten::floor_divide", floor_divide},
        {"aten::var.correction", spread},
        {"aten::std.correction", spread},
        {"aten::var_mean.correction", spread_and_mean},
        {"aten::std_mean.correction", spread_and_mean},
        {"aten::mse_loss_backward", mse_loss_backward},
        {"aten::max", extreme},
        {"aten::min", extreme},
        {"aten::histc", histc},
        {"aten::_thnn_fused_lstm_cell", lstm_cell},
        {"aten::_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward},
        {"aten::_thnn_fused_gru_cell", gru_cell},
        {"aten::_thnn_fused_gru_cell_backward", gru_cell_backward},
    };
    return *by_name;
}

} // namespace

std::optional<uint64_t> output_bytes_by_rule(const c10::OperatorHandle &op, const torch::jit::Stack &stack, size_t first) {
    const c10::OperatorName &name = op.operator_name();
    const auto found = rules().find(name.overload_name.empty() ? name.name : name.name + "." + name.overload_name);
    if (found == rules().end()) {
        return std::nullopt;
    }
    try {
        return found->second(Args(stack).slice(first));
    } catch (const std::exception &) {
        return std::nullopt; // arguments a rule cannot read (a tensor of fewer dims than it expects)
    }
}

} // namespace tr_native

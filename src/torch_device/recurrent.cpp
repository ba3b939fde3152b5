// The fused cells of libtorch's recurrent layers on the simulated device. `nn.LSTM` and `nn.GRU`
// (and their cells) take a fused cell on any device but the CPU, `_thnn_fused_lstm_cell` and
// `_thnn_fused_gru_cell` with their backward, and only CUDA has kernels for them. On CUDA the
// device runs CUDA's through the fallback; on the simulated device these compute the same cells
// with the device's own ops (each one under the manager), keeping in the workspace what CUDA's
// kernels keep there: the activated gates (LSTM: input, forget, cell, output; GRU: reset, update,
// new, the hidden state's new-gate part with its bias, and the hidden state). Their results differ
// from the CPU's own recurrent path in the last bits, as CUDA's do: that path adds the biases
// inside its products.
#include "device.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>
#include <utility>

namespace tr_device {
namespace {

bool on_cuda() { return callbacks->accelerator() >= 0; }

at::Tensor sigmoid_grad(const at::Tensor &y) { return y * (1 - y); }  // from the sigmoid's output
at::Tensor tanh_grad(const at::Tensor &y) { return 1 - y * y; }       // from the tanh's output

at::Tensor with_biases(at::Tensor gates, const std::optional<at::Tensor> &bias) {
    return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

// The gradient of what a bias was added to, summed over the batch, as the bias's gradient.
at::Tensor bias_grad(const at::Tensor &gates_grad, bool has_bias) { return has_bias ? gates_grad.sum(0) : at::Tensor(); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor &input_gates, const at::Tensor &hidden_gates,
                                                         const at::Tensor &cx, const std::optional<at::Tensor> &input_bias,
                                                         const std::optional<at::Tensor> &hidden_bias) {
    const at::Tensor gates = with_biases(with_biases(input_gates + hidden_gates, input_bias), hidden_bias);
    auto chunks = gates.chunk(4, 1);
    const at::Tensor in = chunks[0].sigmoid(), forget = chunks[1].sigmoid(), cell = chunks[2].tanh(), out = chunks[3].sigmoid();
    at::Tensor cy = forget * cx + in * cell;
    at::Tensor hy = out * cy.tanh();
    return {std::move(hy), std::move(cy), at::cat({in, forget, cell, out}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor> &grad_hy,
                                                                  const std::optional<at::Tensor> &grad_cy, const at::Tensor &cx,
                                                                  const at::Tensor &cy, const at::Tensor &workspace, bool has_bias) {
    const bool has_grad_hy = grad_hy.has_value() && grad_hy->defined();
    if (!has_grad_hy && !(grad_cy.has_value() && grad_cy->defined())) {
        return {}; // nothing to take back, as CUDA's kernel
    }
    auto gates = workspace.chunk(4, 1);
    const at::Tensor &in = gates[0], &forget = gates[1], &cell = gates[2], &out = gates[3];
    const at::Tensor go = has_grad_hy ? *grad_hy : at::zeros_like(cy);
    const at::Tensor tanh_cy = cy.tanh();
    at::Tensor gc = go * out * tanh_grad(tanh_cy);
    if (grad_cy.has_value() && grad_cy->defined()) {
        gc = gc + *grad_cy;
    }
    at::Tensor grad_gates = at::cat({gc * cell * sigmoid_grad(in), gc * cx * sigmoid_grad(forget), gc * in * tanh_grad(cell),
                                     go * tanh_cy * sigmoid_grad(out)},
                                    1);
    at::Tensor grad_bias = bias_grad(grad_gates, has_bias);
    return {std::move(grad_gates), gc * forget, std::move(grad_bias)};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor &input_gates, const at::Tensor &hidden_gates, const at::Tensor &hx,
                                            const std::optional<at::Tensor> &input_bias,
                                            const std::optional<at::Tensor> &hidden_bias) {
    auto i = with_biases(input_gates, input_bias).chunk(3, 1);
    auto h = with_biases(hidden_gates, hidden_bias).chunk(3, 1);
    const at::Tensor reset = (i[0] + h[0]).sigmoid(), update = (i[1] + h[1]).sigmoid();
    const at::Tensor fresh = (i[2] + reset * h[2]).tanh();
    at::Tensor hy = fresh + update * (hx - fresh);
    return {std::move(hy), at::cat({reset, update, fresh, h[2], hx}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(const at::Tensor &grad_hy,
                                                                                          const at::Tensor &workspace,
                                                                                          bool has_bias) {
    auto w = workspace.chunk(5, 1);
    const at::Tensor &reset = w[0], &update = w[1], &fresh = w[2], &hidden_new = w[3], &hx = w[4];
    const at::Tensor g_update = grad_hy * (hx - fresh) * sigmoid_grad(update);
    const at::Tensor g_fresh = grad_hy * (1 - update) * tanh_grad(fresh);
    const at::Tensor g_reset = g_fresh * hidden_new * sigmoid_grad(reset);
    at::Tensor grad_input = at::cat({g_reset, g_update, g_fresh}, 1);
    at::Tensor grad_hidden = at::cat({g_reset, g_update, g_fresh * reset}, 1);
    at::Tensor grad_input_bias = bias_grad(grad_input, has_bias), grad_hidden_bias = bias_grad(grad_hidden, has_bias);
    return {std::move(grad_input), std::move(grad_hidden), grad_hy * update, std::move(grad_input_bias),
            std::move(grad_hidden_bias)};
}

// A cell as the kernel of its op (`Arguments` of them on the stack): CUDA's through the fallback
// where the device computes on CUDA, else `cell` over the arguments, its results (a tuple) pushed
// in their place.
template <size_t Arguments, typename Cell> void cell_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack, Cell cell) {
    if (on_cuda()) {
        return fallback(op, stack);
    }
    auto results = cell(torch::jit::last(*stack, Arguments));
    torch::jit::drop(*stack, Arguments);
    std::apply([&](auto &&...r) { torch::jit::push(*stack, std::move(r)...); }, std::move(results));
}

void lstm_cell_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    cell_kernel<5>(op, stack, [](c10::ArrayRef<c10::IValue> a) {
        return lstm_cell(a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), a[3].toOptional<at::Tensor>(),
                         a[4].toOptional<at::Tensor>());
    });
}

void lstm_cell_backward_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    cell_kernel<6>(op, stack, [](c10::ArrayRef<c10::IValue> a) {
        return lstm_cell_backward(a[0].toOptional<at::Tensor>(), a[1].toOptional<at::Tensor>(), a[2].toTensor(),
                                  a[3].toTensor(), a[4].toTensor(), a[5].toBool());
    });
}

void gru_cell_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    cell_kernel<5>(op, stack, [](c10::ArrayRef<c10::IValue> a) {
        return gru_cell(a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), a[3].toOptional<at::Tensor>(),
                        a[4].toOptional<at::Tensor>());
    });
}

void gru_cell_backward_kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    cell_kernel<3>(op, stack, [](c10::ArrayRef<c10::IValue> a) {
        return gru_cell_backward(a[0].toTensor(), a[1].toTensor(), a[2].toBool());
    });
}

} // namespace

void register_recurrent_cells() {
    static auto *aten = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    aten->impl("_thnn_fused_lstm_cell", torch::CppFunction::makeFromBoxedFunction<&lstm_cell_kernel>());
    aten->impl("_thnn_fused_lstm_cell_backward_impl", torch::CppFunction::makeFromBoxedFunction<&lstm_cell_backward_kernel>());
    aten->impl("_thnn_fused_gru_cell", torch::CppFunction::makeFromBoxedFunction<&gru_cell_kernel>());
    aten->impl("_thnn_fused_gru_cell_backward", torch::CppFunction::makeFromBoxedFunction<&gru_cell_backward_kernel>());
}

} // namespace tr_device

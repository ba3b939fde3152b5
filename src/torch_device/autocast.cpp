// Autocast on the `tensorref` device (`torch.autocast("tensorref")`): ops cast as CUDA's autocast
// casts them, by the policy lists libtorch shares among accelerator backends (ATen's
// autocast_mode.h: matrix products and convolutions in the lower precision; norms, losses,
// softmax and sums in float; mixed inputs promoted; `binary_cross_entropy` refused). Every other
// op passes through. The casts are ops of the device, so what they make is managed like any
// other storage (autocast's cache of weights cast for one forward pass included). On the
// simulated device the same casts run the CPU's kernels: the CPU's own autocast lists differ.
#include "device.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace tr_device {
namespace {

at::Tensor binary_cross_entropy_refused(const at::Tensor &, const at::Tensor &, const std::optional<at::Tensor> &, int64_t) {
    TORCH_CHECK(false, "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast: "
                       "use binary_cross_entropy_with_logits (BCEWithLogitsLoss), as CUDA's autocast says");
}

} // namespace

void register_autocast() {
    static auto *others = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
    others->fallback(torch::CppFunction::makeFallthrough());

    static auto *aten = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
    auto &m = *aten;      // the name libtorch's registration macros write to
    using namespace at;   // where their signatures' types are named
#define TR_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TR_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TR_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TR_FP32_APPEND_DTYPE(FUNC, NAME, SIGNATURE, REDISPATCH, POLICY) \
    KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(FUNC, NAME, SIGNATURE, REDISPATCH, POLICY)
#define TR_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
    AT_FORALL_LOWER_PRECISION_FP(TR_LOWER_PRECISION)
    AT_FORALL_FP32(TR_FP32)
    AT_FORALL_FP32_SET_OPT_DTYPE(TR_FP32_SET_OPT_DTYPE)
    AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(TR_FP32_APPEND_DTYPE)
    AT_FORALL_PROMOTE(TR_PROMOTE)
#undef TR_LOWER_PRECISION
#undef TR_FP32
#undef TR_FP32_SET_OPT_DTYPE
#undef TR_FP32_APPEND_DTYPE
#undef TR_PROMOTE
    m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_refused));
}

} // namespace tr_device

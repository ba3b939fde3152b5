// The bytes a generated op's kernel will allocate for its outputs, before it runs: its arguments,
// as the runner hands them to the kernel (args.h), boxed for the op's meta kernel
// (residency/core/outputs.cpp). The runner reserves that much room where the device's kernels
// allocate without asking the manager (CUDA: run.rs, `Op::reserve`).
#include "args.h"
#include "../../residency/core/outputs.h"

#include <mutex>
#include <string>
#include <unordered_map>

namespace {

// `arg` as the boxed value of the schema's argument `declared`; nullopt for one it does not box
// (a list of numbers given as `Scalar[]`).
std::optional<c10::IValue> boxed(const tr_aten::Arg &arg, const c10::Argument &declared) {
    const auto *list = declared.type()->castRaw<c10::ListType>();
    switch (arg.tag) {
    case tr_aten::NONE:
        return c10::IValue();
    case tr_aten::TENSOR:
        return c10::IValue(arg.tensor());
    case tr_aten::TENSORS:
        if (list != nullptr && list->getElementType()->kind() == c10::TypeKind::OptionalType) {
            return c10::IValue(arg.opt_tensors());
        }
        return c10::IValue(arg.tensors());
    case tr_aten::INT:
    case tr_aten::DTYPE: // a ScalarType, boxed as its number
        return c10::IValue(arg.i);
    case tr_aten::INTS:
        return c10::IValue(arg.ints().vec());
    case tr_aten::FLOAT:
        return c10::IValue(arg.f);
    case tr_aten::FLOATS:
        if (list != nullptr && list->getElementType()->kind() == c10::TypeKind::FloatType) {
            return c10::IValue(arg.floats().vec());
        }
        return std::nullopt;
    case tr_aten::BOOL:
        return c10::IValue(arg.i != 0);
    case tr_aten::SCALAR:
        return c10::IValue(arg.scalar());
    case tr_aten::STR:
        return c10::IValue(std::string(static_cast<const char *>(arg.p), arg.len));
    default:
        return std::nullopt;
    }
}

// Whether the generated C function leaves the schema's argument `a` out, and its kernel passes its
// default (tools/schema.py's DEFAULTED: an optional layout, device, memory format or generator, a
// memory format, `pin_memory`).
bool defaulted(const c10::Argument &a) {
    const auto *optional = a.real_type()->castRaw<c10::OptionalType>();
    const c10::TypeKind kind = optional != nullptr ? optional->getElementType()->kind() : a.real_type()->kind();
    switch (kind) {
    case c10::TypeKind::MemoryFormatType:
        return true;
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::DeviceObjType:
    case c10::TypeKind::GeneratorType:
        return optional != nullptr;
    case c10::TypeKind::BoolType:
        return optional != nullptr && a.name() == "pin_memory";
    default:
        return false;
    }
}

// The operator of the schema's overload named `overload` ("div.Tensor_mode"), found once per name.
std::optional<c10::OperatorHandle> operator_of(const std::string &overload) {
    static std::mutex lock;
    static auto *found = new std::unordered_map<std::string, std::optional<c10::OperatorHandle>>; // lives for the process
    std::lock_guard<std::mutex> guard(lock);
    auto it = found->find(overload);
    if (it == found->end()) {
        const auto dot = overload.find('.');
        const std::string overload_name = dot == std::string::npos ? "" : overload.substr(dot + 1);
        it = found->emplace(overload, c10::Dispatcher::singleton().findOp({"aten::" + overload.substr(0, dot), overload_name})).first;
    }
    return it->second;
}

} // namespace

extern "C" {

// Writes into `*bytes` the bytes of the new storages the kernel of the schema's overload
// `overload` (`len` bytes, not NUL-terminated) will make for its outputs on the `n` arguments
// `args` (the schema's, but those its kernel passes defaults for), and 1 into `*known`; 0 there
// where that cannot be told.
int tr_aten_output_bytes(const char *overload, size_t len, const tr_aten::Arg *args, size_t n, uint64_t *bytes, int *known,
                         char *err, size_t err_len) {
    return tr_native::guarded(err, err_len, [&] {
        *known = 0;
        const auto op = operator_of(std::string(overload, len));
        if (!op) {
            return;
        }
        torch::jit::Stack stack;
        size_t k = 0;
        for (const c10::Argument &declared : op->schema().arguments()) {
            if (defaulted(declared)) {
                stack.push_back(declared.default_value().value_or(c10::IValue()));
                continue;
            }
            auto v = k < n ? boxed(args[k++], declared) : std::nullopt;
            if (!v) {
                return;
            }
            stack.push_back(std::move(*v));
        }
        if (k != n) {
            return; // the arguments are not this overload's
        }
        if (const auto made = tr_native::output_bytes(*op, stack, 0)) {
            *bytes = *made;
            *known = 1;
        }
    });
}

} // extern "C"

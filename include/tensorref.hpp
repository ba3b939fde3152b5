// libtensorref for C++17: a header-only binding over the C ABI of tensorref.h.
//
// Ownership.
//   tr::Tensor owns one reference to a tensor handle and releases it when destroyed. It is
//   move-only: a moved-from Tensor is empty and releases nothing. Copies are explicit:
//     t.retain()  another owner of the same handle (one more reference; each owner releases one),
//     t.alias()   a new handle to the same storage with its own life (owned by the current scope).
//   A copy constructor is deliberately absent, so a reference is never added by accident (passing
//   by value, a range-for without `&`); all functions take `const Tensor&`.
//   tr::Scope opens a dispose scope (tr_scope_new) and disposes it when destroyed, on every exit
//   path, exceptions included. It is move-only too. tr::ScopeRef is a non-owning view of a scope
//   (what Scope::current() and Tensor::scope() return); a Scope is a ScopeRef that also owns.
//
// Tensors and scopes together.
//   A handle created while a scope is open on this thread is owned by that scope AND by the Tensor
//   object the op returns: it is one reference, and whichever lets go first ends it. Destroying
//   the Tensor releases it (and it leaves its scope); disposing the scope releases it (and the
//   Tensor object is left holding a dead handle: using it throws tr::Error with
//   TR_ERR_STALE_HANDLE, destroying it does nothing). So temporaries die as soon as their Tensor
//   objects do, and a scope guarantees that nothing it captured outlives it. To keep a result, move
//   it out first: t.move_to_outer_scope(), t.detach_from_scope() or scope.dispose_everything_but().
//   retain() on a handle a scope owns: the handle has two references and the scope drops one
//   when disposed, so the handle outlives the scope (detached) until one of its two owners lets
//   go; the other owner then holds a dead handle. When two owners must each keep a handle alive,
//   retain a handle that no scope owns (detach_from_scope() first).
//
// Errors.
//   Every failing call throws tr::Error: status() is the tr_status code, message() the text of
//   tr_last_error for that call, what() the message with the code. Destructors never throw (a
//   stale handle there means a scope already released it). The ABI version of the header
//   (TR_ABI_VERSION) is compared with the library's (tr_abi_version()) before the first call into
//   the library; a mismatch throws tr::AbiMismatch (and again on every later call).
//
// Threads.
//   As in the C ABI: every function may be called from any thread; scope stacks, statistics, the
//   grad mode and the last error are per thread. A Tensor may be moved to and destroyed on
//   another thread. A Scope belongs to the thread that opened it (it captures that thread's
//   handles); disposing it from another thread is allowed.
//
// Residency.
//   tr::Residency runs the process's residency manager (a device byte budget; policies Resident,
//   Genoa, Flow) while it lives: its constructor configures it from a tr::ResidencyConfig (the
//   library's defaults plus your budget), its destructor disables it. Statistics, iteration marks
//   and timelines are its static members; Tensor::pin_resident / is_resident pin and probe. Events
//   reach a std::function; whatever it throws is caught before it can reach the library.
//
// Weights.
//   tr::Weights::load reads a safetensors file into named tensors (file order). tr::dispose_all
//   releases many tensors in one call. The demonstration model, tr::MiniLM, is an add-on with its
//   own header, tensorref_minilm.hpp.
//
// Ops are generated from src/ops/ops.def by tools/emit_cpp.py: member functions
// (include/tensorref_ops_generated.hpp: a.add(b), x.relu(), w.requires_grad_(true)) and free functions
// (include/tensorref_functions_generated.hpp: tr::add(a, b), tr::zeros({2, 3}), tr::optim_sgd_step({w}, 0.1)),
// named as in C without the `tr_` prefix and the receiver `tensor_` (tr::add, tr::optim_sgd_step),
// and the operators (include/tensorref_operators_generated.hpp: `a + b`, `2 * a`, `a += b` in place).
//
// Every function is inline or a template member: the header is ODR-safe in any number of
// translation units. Link with -ltensorref.
#ifndef TENSORREF_HPP
#define TENSORREF_HPP

#include "tensorref.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

// The C enums as enum classes (tr::DType, tr::Policy, ...), generated from the ABI manifest.
#define TENSORREF_HPP_INSIDE
#include "tensorref_enums_generated.hpp"
#undef TENSORREF_HPP_INSIDE

namespace tr {

// ---------------------------------------------------------------- errors

/// A failed call: the status code and the calling thread's tr_last_error message.
class Error : public std::runtime_error {
  public:
    Error(tr_status status, std::string message)
        : std::runtime_error(describe(status, message)), status_(status), message_(std::move(message)) {}

    /// The status code the C function returned.
    tr_status status() const noexcept { return status_; }
    /// The library's message for the failure (tr_last_error), without the status text.
    const std::string& message() const noexcept { return message_; }

    /// The error for a status that a C function on this thread just returned.
    static Error last(tr_status status) { return Error(status, last_message()); }

    /// The calling thread's tr_last_error text ("" if none).
    static std::string last_message() {
        size_t len = 0;
        tr_status s = tr_last_error(nullptr, 0, &len);
        if (s != TR_OK && s != TR_ERR_BUFFER_TOO_SMALL) return std::string();
        std::string text(len + 1, '\0');
        if (tr_last_error(&text[0], text.size(), &len) != TR_OK) return std::string();
        text.resize(len);
        return text;
    }

  private:
    static std::string describe(tr_status status, const std::string& message) {
        std::string code = "status " + std::to_string(static_cast<int32_t>(status));
        if (message.empty()) return std::string(tr_status_str(status)) + " (" + code + ")";
        return message + " (" + code + ")";
    }

    tr_status status_;
    std::string message_;
};

/// The header and the library disagree on the ABI version: the program was compiled against
/// another tensorref.h than the libtensorref it loaded. Its status is TR_ERR_INVALID_ARG.
class AbiMismatch : public Error {
  public:
    AbiMismatch(uint32_t header_abi, uint32_t library_abi)
        : Error(TR_ERR_INVALID_ARG,
                "ABI mismatch: this program was compiled with tensorref.h of ABI version " +
                    std::to_string(header_abi) + " but the loaded libtensorref has ABI version " +
                    std::to_string(library_abi) + " (" + tr_version() +
                    "); rebuild against the matching header"),
          header_abi_(header_abi),
          library_abi_(library_abi) {}

    uint32_t header_abi() const noexcept { return header_abi_; }
    uint32_t library_abi() const noexcept { return library_abi_; }

  private:
    uint32_t header_abi_;
    uint32_t library_abi_;
};

// ---------------------------------------------------------------- versions

/// The library's ABI version (tr_abi_version()).
inline uint32_t abi_version() noexcept { return tr_abi_version(); }

/// The library's version text: library, ABI and libtorch versions, CUDA (tr_version()).
inline std::string version() { return tr_version(); }

/// Throws AbiMismatch unless the library's ABI version equals `header_abi` (by default the
/// TR_ABI_VERSION of the tensorref.h this code was compiled with). Every call through this header
/// runs it once per process before its first call into the library.
inline void check_abi_version(uint32_t header_abi = TR_ABI_VERSION) {
    uint32_t library_abi = tr_abi_version();
    if (library_abi != header_abi) throw AbiMismatch(header_abi, library_abi);
}

namespace detail {

/// Checks the ABI version once (thread-safe); a failed check throws again on the next call.
inline void ensure_abi() {
    static const bool checked = (check_abi_version(), true);
    (void)checked;
}

/// Calls a C function of the library and throws tr::Error unless it returns TR_OK.
template <class Fn, class... Args>
inline void call(Fn fn, Args... args) {
    ensure_abi();
    tr_status status = fn(args...);
    if (status != TR_OK) throw Error::last(status);
}

/// `text` as a C string argument; a NUL inside it would end the C string there ("a\0b" would
/// open "a"), so it throws TR_ERR_INVALID_ARG.
inline const char* c_string(const std::string& text, const char* what) {
    if (text.find('\0') != std::string::npos)
        throw Error(TR_ERR_INVALID_ARG, std::string(what) + " contains a NUL byte, which a C string cannot carry");
    return text.c_str();
}

}  // namespace detail

// ---------------------------------------------------------------- dtypes
// tr::DType and the other enums are generated (tensorref_enums_generated.hpp, included above).

/// The dtype of a C++ element type (no C++ type maps to F16 or BF16).
template <class T>
struct dtype_of;
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::I8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::I16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

// ---------------------------------------------------------------- argument lists

class Tensor;

/// A list of int64 (a shape, a list of dims) passed to an op: from `{2, 3}`, a std::vector or a
/// std::array. It holds a copy of the values (in place up to 8 of them), so it never dangles.
class IntList {
  public:
    IntList() noexcept = default;
    IntList(std::initializer_list<int64_t> values) { assign(values.begin(), values.size()); }
    IntList(const std::vector<int64_t>& values) { assign(values.data(), values.size()); }
    template <size_t N>
    IntList(const std::array<int64_t, N>& values) {
        assign(values.data(), N);
    }
    IntList(const int64_t* data, size_t size) { assign(data, size); }

    const int64_t* data() const noexcept { return size_ <= kInline ? inline_.data() : heap_.data(); }
    size_t size() const noexcept { return size_; }

  private:
    static constexpr size_t kInline = 8;

    void assign(const int64_t* data, size_t size) {
        size_ = size;
        if (size <= kInline) {
            for (size_t i = 0; i < size; i++) inline_[i] = data[i];
        } else {
            heap_.assign(data, data + size);
        }
    }

    std::array<int64_t, kInline> inline_{};
    std::vector<int64_t> heap_;
    size_t size_ = 0;
};

/// A list of borrowed tensors: from `{a, b * 2.0}` (temporaries too: they live until the end of
/// the call) or a std::vector<Tensor>. The handles are copied into the list; the tensors are not
/// retained.
class TensorList {
  public:
    /// One element of a braced list.
    class Item {
      public:
        Item(const Tensor& t) noexcept;
        tr_tensor raw() const noexcept { return id_; }

      private:
        tr_tensor id_;
    };

    TensorList() = default;
    TensorList(std::initializer_list<Item> tensors) {
        ids_.reserve(tensors.size());
        for (const Item& t : tensors) ids_.push_back(t.raw());
    }
    TensorList(const std::vector<Tensor>& tensors);
    TensorList(const std::vector<std::reference_wrapper<const Tensor>>& tensors);

    const tr_tensor* data() const noexcept { return ids_.data(); }
    size_t size() const noexcept { return ids_.size(); }

  private:
    std::vector<tr_tensor> ids_;
};

/// An optional borrowed tensor (an op's `T?` parameter): a Tensor, or std::nullopt / nullptr for
/// none (the handle 0).
class OptionalTensor {
  public:
    OptionalTensor() noexcept = default;
    OptionalTensor(std::nullopt_t) noexcept {}
    OptionalTensor(std::nullptr_t) noexcept {}
    OptionalTensor(const Tensor& t) noexcept;
    OptionalTensor(const std::optional<Tensor>& t) noexcept;

    tr_tensor raw() const noexcept { return id_; }

  private:
    tr_tensor id_{0};
};

/// A scalar argument that keeps its type (tr_scalar): made from a bool, any integer type (held as
/// int64, exactly) or a floating-point type. Ops promote it with the tensor as PyTorch promotes a
/// Python number: `ints + 1` stays integer, `ints + 0.5` is f32, `f16s * 2.0` stays f16.
class Scalar {
  public:
    Scalar(bool v) noexcept : s_{TR_SCALAR_KIND_BOOL, 0, 0.0, v} {}
    /// An integer; an unsigned value above INT64_MAX throws TR_ERR_INVALID_ARG.
    template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
    Scalar(T v) : s_{TR_SCALAR_KIND_INT, to_int64(v), 0.0, false} {}
    template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
    Scalar(T v) noexcept : s_{TR_SCALAR_KIND_FLOAT, 0, static_cast<double>(v), false} {}
    /// The value a C function wrote (tr_tensor_item_scalar).
    explicit Scalar(const tr_scalar& s) noexcept : s_(s) {}

    bool is_int() const noexcept { return s_.kind == TR_SCALAR_KIND_INT; }
    bool is_float() const noexcept { return s_.kind == TR_SCALAR_KIND_FLOAT; }
    bool is_bool() const noexcept { return s_.kind == TR_SCALAR_KIND_BOOL; }

    /// The value as int64 (a float is truncated toward zero).
    int64_t to_int() const noexcept {
        return is_int() ? s_.i : is_bool() ? int64_t{s_.b} : static_cast<int64_t>(s_.f);
    }
    /// The value as a double (an integer beyond 2^53 rounds).
    double to_double() const noexcept {
        return is_float() ? s_.f : is_bool() ? double{s_.b ? 1.0 : 0.0} : static_cast<double>(s_.i);
    }

    tr_scalar raw() const noexcept { return s_; }

  private:
    template <class T>
    static int64_t to_int64(T v) {
        if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
            if (v > static_cast<T>(INT64_MAX))
                throw Error(TR_ERR_INVALID_ARG, "scalar " + std::to_string(v) + " does not fit in int64");
        }
        return static_cast<int64_t>(v);
    }

    tr_scalar s_;
};

}  // namespace tr

#define TENSORREF_HPP_INSIDE
#include "tensorref_ops_generated.hpp"

namespace tr {

class ScopeRef;

// ---------------------------------------------------------------- Tensor

/// The owner of one reference to a tensor handle (see the top of this file).
class Tensor : public detail::TensorOps<Tensor> {
  public:
    /// An empty owner (handle 0): owns nothing, releases nothing.
    Tensor() noexcept = default;

    Tensor(const Tensor&) = delete;
    Tensor& operator=(const Tensor&) = delete;

    /// Takes over `other`'s reference; `other` is left empty.
    Tensor(Tensor&& other) noexcept : h_(other.h_) { other.h_ = tr_tensor{0}; }

    /// Releases this owner's reference (if any), then takes over `other`'s.
    Tensor& operator=(Tensor&& other) noexcept {
        if (this != &other) {
            release_quietly();
            h_ = other.h_;
            other.h_ = tr_tensor{0};
        }
        return *this;
    }

    /// Releases the reference; a handle a scope already released is left alone.
    ~Tensor() { release_quietly(); }

    /// Takes over one reference of a raw handle (e.g. one a C function returned).
    static Tensor adopt(tr_tensor handle) noexcept {
        Tensor t;
        t.h_ = handle;
        return t;
    }

    /// The raw handle, still owned by this object.
    tr_tensor raw() const noexcept { return h_; }

    /// Gives up ownership without releasing: the caller now owns the reference.
    tr_tensor into_raw() noexcept {
        tr_tensor h = h_;
        h_ = tr_tensor{0};
        return h;
    }

    /// Whether this object holds a handle (moved-from and disposed owners do not). The handle may
    /// still be dead (its scope disposed it): see is_valid().
    explicit operator bool() const noexcept { return h_.id != 0; }

    /// Whether the handle is live (false for an empty owner or a handle a scope released).
    bool is_valid() const {
        bool valid = false;
        detail::call(tr_tensor_is_valid, h_, &valid);
        return valid;
    }

    /// Another owner of the same handle: adds one reference (tr_tensor_retain).
    [[nodiscard]] Tensor retain() const {
        detail::call(tr_tensor_retain, h_);
        return adopt(h_);
    }

    /// A new handle to the same storage with its own reference count, owned by the current scope
    /// (tr_tensor_alias). Disposing one alias leaves the other valid.
    [[nodiscard]] Tensor alias() const {
        tr_tensor out{0};
        detail::call(tr_tensor_alias, h_, &out);
        return adopt(out);
    }

    /// Releases this owner's reference now and leaves it empty. Unlike the destructor it reports
    /// a dead handle (TR_ERR_STALE_HANDLE). On an empty owner it does nothing.
    void dispose() {
        tr_tensor h = into_raw();
        detail::call(tr_tensor_release, h);
    }

    // ------------------------------------------------------------ host data

    /// Copies `bytes` bytes of row-major host data into a new tensor (tr_tensor_from_data).
    [[nodiscard]] static Tensor from_data(const void* data, size_t bytes, IntList shape, DType dtype) {
        tr_tensor out{0};
        detail::call(tr_tensor_from_data, static_cast<const uint8_t*>(data), bytes, shape.data(),
                     shape.size(), static_cast<tr_dtype>(dtype), &out);
        return adopt(out);
    }

    /// Copies `values` into a new tensor of the given shape; the dtype follows T.
    template <class T>
    [[nodiscard]] static Tensor from_vector(const std::vector<T>& values, IntList shape) {
        if constexpr (std::is_same_v<T, bool>) {
            std::vector<uint8_t> bytes(values.begin(), values.end());
            return from_data(bytes.data(), bytes.size(), shape, DType::Bool);
        } else {
            return from_data(values.data(), values.size() * sizeof(T), shape, dtype_of_v<T>);
        }
    }

    /// Copies `values` into a new one-dimensional tensor.
    template <class T>
    [[nodiscard]] static Tensor from_vector(const std::vector<T>& values) {
        return from_vector(values, {static_cast<int64_t>(values.size())});
    }

    /// The elements in row-major order; T must match the tensor's dtype (else TR_ERR_DTYPE).
    template <class T>
    std::vector<T> to_vector() const {
        DType actual = dtype();
        if (actual != dtype_of_v<T>) {
            throw Error(TR_ERR_DTYPE, std::string("to_vector<") + to_string(dtype_of_v<T>) +
                                          "> on a tensor of dtype " + to_string(actual));
        }
        size_t n = numel();
        size_t written = 0;
        if constexpr (std::is_same_v<T, bool>) {
            std::vector<uint8_t> bytes(n);
            detail::call(tr_tensor_copy_to, h_, bytes.data(), bytes.size(), &written);
            return std::vector<bool>(bytes.begin(), bytes.end());
        } else {
            std::vector<T> values(n);
            detail::call(tr_tensor_copy_to, h_, reinterpret_cast<uint8_t*>(values.data()),
                         n * sizeof(T), &written);
            return values;
        }
    }

    /// The sizes of the dimensions.
    std::vector<int64_t> shape() const {
        std::vector<int64_t> dims(8);
        size_t ndim = 0;
        detail::ensure_abi();
        tr_status s = tr_tensor_shape(h_, dims.data(), dims.size(), &ndim);
        if (s == TR_ERR_BUFFER_TOO_SMALL) {
            dims.resize(ndim);
            s = tr_tensor_shape(h_, dims.data(), dims.size(), &ndim);
        }
        if (s != TR_OK) throw Error::last(s);
        dims.resize(ndim);
        return dims;
    }

    DType dtype() const {
        tr_dtype d{};
        detail::call(tr_tensor_dtype, h_, &d);
        return static_cast<DType>(d);
    }

    size_t numel() const {
        size_t n = 0;
        detail::call(tr_tensor_numel, h_, &n);
        return n;
    }

    /// Where the memory is: -1 for host memory, n >= 0 for CUDA device n.
    int32_t device_index() const {
        int32_t d = -1;
        detail::call(tr_tensor_device, h_, &d);
        return d;
    }

    /// The value of a one-element tensor as a double (else TR_ERR_SHAPE).
    double item() const {
        double v = 0;
        detail::call(tr_tensor_item, h_, &v);
        return v;
    }

    /// The value of a one-element tensor typed by its dtype: an integer (exact to 64 bits),
    /// a bool or a float (else TR_ERR_SHAPE).
    Scalar item_scalar() const {
        tr_scalar v{};
        detail::call(tr_tensor_item_scalar, h_, &v);
        return Scalar(v);
    }

    // ------------------------------------------------------------ scopes

    /// The scope that owns this handle; a null ScopeRef if none does.
    ScopeRef scope() const;

    /// Hands the handle to the scope outside its owning scope (detached if there is none).
    void move_to_outer_scope() const { detail::call(tr_tensor_move_to_outer_scope, h_); }

    /// The handle leaves its owning scope, if any; this owner alone decides its life.
    void detach_from_scope() const { detail::call(tr_tensor_detach_from_scope, h_); }

    /// Hands the handle to `target`; a null ScopeRef detaches it. A disposed target throws
    /// TR_ERR_SCOPE_DISPOSED and changes nothing.
    void move_to_scope(const ScopeRef& target) const;

    // ------------------------------------------------------------ residency (see tr::Residency)

    /// Pins the tensor resident on the compute device (true: loaded now, never evicted, counted
    /// against the budget) or unpins it (false). Throws TR_ERR_BUDGET_TOO_SMALL when the pinned
    /// bytes would exceed the budget, TR_ERR_INVALID_ARG when no manager runs.
    void pin_resident(bool pinned = true) const { detail::call(tr_tensor_pin_resident, h_, pinned); }

    /// Whether the tensor has a copy on the compute device now. Throws TR_ERR_INVALID_ARG when no
    /// manager runs.
    bool is_resident() const {
        bool out = false;
        detail::call(tr_tensor_is_resident, h_, &out);
        return out;
    }

  private:
    void release_quietly() noexcept {
        if (h_.id != 0) (void)tr_tensor_release(h_);
        h_ = tr_tensor{0};
    }

    tr_tensor h_{0};
};

static_assert(sizeof(Tensor) == sizeof(tr_tensor), "a Tensor is just its handle");
static_assert(!std::is_copy_constructible_v<Tensor> && std::is_nothrow_move_constructible_v<Tensor>,
              "Tensor is a move-only owner");

inline TensorList::Item::Item(const Tensor& t) noexcept : id_(t.raw()) {}

inline TensorList::TensorList(const std::vector<Tensor>& tensors) {
    ids_.reserve(tensors.size());
    for (const Tensor& t : tensors) ids_.push_back(t.raw());
}

inline TensorList::TensorList(const std::vector<std::reference_wrapper<const Tensor>>& tensors) {
    ids_.reserve(tensors.size());
    for (const Tensor& t : tensors) ids_.push_back(t.raw());
}

inline OptionalTensor::OptionalTensor(const Tensor& t) noexcept : id_(t.raw()) {}

inline OptionalTensor::OptionalTensor(const std::optional<Tensor>& t) noexcept
    : id_(t ? t->raw() : tr_tensor{0}) {}

// ---------------------------------------------------------------- scopes

/// A non-owning view of a scope handle; a default-constructed ScopeRef is the null scope
/// (handle 0: "no scope"). Every operation on a disposed scope, except dispose(), throws
/// tr::Error with TR_ERR_SCOPE_DISPOSED.
class ScopeRef {
  public:
    ScopeRef() noexcept = default;
    explicit ScopeRef(tr_scope handle) noexcept : s_(handle) {}

    tr_scope raw() const noexcept { return s_; }
    /// Whether this names a scope (not the null scope). It may be disposed.
    explicit operator bool() const noexcept { return s_.id != 0; }

    friend bool operator==(const ScopeRef& a, const ScopeRef& b) noexcept { return a.s_.id == b.s_.id; }
    friend bool operator!=(const ScopeRef& a, const ScopeRef& b) noexcept { return a.s_.id != b.s_.id; }

    /// This thread's current (innermost open) scope, or the null scope.
    static ScopeRef current() {
        tr_scope s{0};
        detail::call(tr_scope_current, &s);
        return ScopeRef(s);
    }

    /// Releases every owned handle and closes the scope (out of order too). A second dispose, or
    /// one of the null scope, does nothing.
    void dispose() const { detail::call(tr_scope_dispose, s_); }

    /// Releases every owned handle; the scope stays open and keeps capturing.
    void dispose_everything() const { detail::call(tr_scope_dispose_everything, s_); }

    /// Releases every owned handle except those in `keep`, which stay owned (they die with the
    /// scope). Tensors in `keep` the scope does not own are left alone.
    void dispose_everything_but(const TensorList& keep) const {
        detail::call(tr_scope_dispose_everything_but, s_, keep.data(), keep.size());
    }

    /// Takes ownership of `t`, from another scope or from the caller.
    void attach(const Tensor& t) const { detail::call(tr_scope_attach, s_, t.raw()); }

    /// If this scope owns `t`, `t` leaves it; otherwise nothing changes.
    void detach(const Tensor& t) const { detail::call(tr_scope_detach, s_, t.raw()); }

    /// If this scope owns `t`, hands it to the outer scope (detached if there is none).
    void move_to_outer(const Tensor& t) const { detail::call(tr_scope_move_to_outer, s_, t.raw()); }

    /// Whether this scope owns `t` (false for a dead `t`).
    bool contains(const Tensor& t) const {
        bool out = false;
        detail::call(tr_scope_contains, s_, t.raw(), &out);
        return out;
    }

    /// The number of handles this scope owns.
    size_t size() const {
        size_t n = 0;
        detail::call(tr_scope_len, s_, &n);
        return n;
    }

  protected:
    tr_scope s_{0};
};

/// An open dispose scope (tr_scope_new): it becomes this thread's current scope and is disposed
/// when this object is destroyed, also during stack unwinding. Move-only; a moved-from Scope
/// disposes nothing.
class Scope : public ScopeRef {
  public:
    Scope() {
        tr_scope s{0};
        detail::call(tr_scope_new, &s);
        s_ = s;
    }

    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

    Scope(Scope&& other) noexcept : ScopeRef(other.s_) { other.s_ = tr_scope{0}; }

    /// Disposes the scope this object owns, then takes over `other`'s.
    Scope& operator=(Scope&& other) noexcept {
        if (this != &other) {
            (void)tr_scope_dispose(s_);
            s_ = other.s_;
            other.s_ = tr_scope{0};
        }
        return *this;
    }

    ~Scope() { (void)tr_scope_dispose(s_); }
};

/// Runs `f(scope)` inside a new scope and disposes the scope on every exit path, exceptions
/// included. A Tensor that `f` returns must be moved out first (move_to_outer_scope) or it is
/// released with the scope.
template <class F>
decltype(auto) with_scope(F&& f) {
    Scope scope;
    return std::forward<F>(f)(scope);
}

inline ScopeRef Tensor::scope() const {
    tr_scope s{0};
    detail::call(tr_tensor_scope, h_, &s);
    return ScopeRef(s);
}

inline void Tensor::move_to_scope(const ScopeRef& target) const {
    detail::call(tr_tensor_move_to_scope, h_, target.raw());
}

// ---------------------------------------------------------------- statistics

/// This thread's scope statistics (docs/dispose-scopes.md). Counters only grow until reset().
struct Stats {
    uint64_t created_outside_scope = 0;
    uint64_t disposed_outside_scope = 0;
    uint64_t created_in_scope = 0;
    uint64_t disposed_in_scope = 0;
    uint64_t attached_to_scope = 0;
    uint64_t detached_from_scope = 0;
    /// (created_in - disposed_in) + (created_outside - disposed_outside).
    int64_t live = 0;

    /// The calling thread's statistics.
    static Stats get() {
        tr_stats s{};
        detail::call(tr_scope_stats_get, &s);
        return Stats{s.created_outside_scope, s.disposed_outside_scope, s.created_in_scope,
                     s.disposed_in_scope,     s.attached_to_scope,      s.detached_from_scope,
                     s.live};
    }

    /// Zeroes the calling thread's statistics.
    static void reset() { detail::call(tr_scope_stats_reset); }

    /// The spec's tuple: (created_outside, disposed_outside, created_in, disposed_in, attached,
    /// detached, live).
    std::array<int64_t, 7> tuple() const noexcept {
        return {static_cast<int64_t>(created_outside_scope), static_cast<int64_t>(disposed_outside_scope),
                static_cast<int64_t>(created_in_scope),      static_cast<int64_t>(disposed_in_scope),
                static_cast<int64_t>(attached_to_scope),     static_cast<int64_t>(detached_from_scope),
                live};
    }

    /// The tuple as text, "(0,0,1,0,0,0,1)".
    std::string to_string() const {
        std::string text = "(";
        for (int64_t v : tuple()) text += std::to_string(v) + ",";
        text.back() = ')';
        return text;
    }

    friend bool operator==(const Stats& a, const Stats& b) noexcept { return a.tuple() == b.tuple(); }
    friend bool operator!=(const Stats& a, const Stats& b) noexcept { return !(a == b); }
};

// ---------------------------------------------------------------- process-wide helpers

/// The number of live tensor handles in the process (all threads): for leak checks.
inline size_t live_handles() {
    detail::ensure_abi();
    return tr_live_handles();
}

/// Logical bytes held by live handles on a device: -1 host memory, n >= 0 CUDA device n.
inline uint64_t live_bytes(int32_t device = -1) {
    detail::ensure_abi();
    return tr_live_bytes(device);
}

/// Seeds libtorch's default random generator (rand, randn, dropout).
inline void manual_seed(uint64_t seed) { detail::call(tr_manual_seed, seed); }

/// Turns gradient tracking off on this thread while it lives, then restores the previous mode.
class NoGradGuard {
  public:
    NoGradGuard() { detail::call(tr_grad_set_enabled, false, &previous_); }
    ~NoGradGuard() { (void)tr_grad_set_enabled(previous_, nullptr); }
    NoGradGuard(const NoGradGuard&) = delete;
    NoGradGuard& operator=(const NoGradGuard&) = delete;

  private:
    bool previous_ = true;
};

// ---------------------------------------------------------------- residency
// The residency manager (docs/residency.md) decides where each tensor's bytes live: ops
// bring their inputs to the compute device and the policy places the results, under a hard device
// byte budget. There is one manager per process; tr::Residency runs it for as long as it lives.
// Its enums (tr::Device, tr::Policy, tr::EventKind) are generated in tensorref_enums_generated.hpp.

/// The manager's configuration (tr_residency_config). A default-constructed one holds the
/// library's defaults (tr_residency_config_default): simulated device, Flow, pinned host memory,
/// prefetch as far ahead as the budget allows (depth 256 ops), unlimited simulated capacity, and
/// a budget of 0, which Genoa and Flow refuse: set budget_bytes.
struct ResidencyConfig {
    Device device;
    /// The CUDA device number (Device::Cuda only).
    int32_t device_index;
    Policy policy;
    /// Hard limit on the bytes the manager holds on the device (Resident ignores it).
    uint64_t budget_bytes;
    /// Page-locked host copies (asynchronous CUDA copies).
    bool pin_host_memory;
    /// How many ops ahead Flow prefetches once it follows a recorded trace.
    uint32_t prefetch_depth;
    /// The simulated device's physical memory; 0 for unlimited.
    uint64_t simulated_capacity;
    /// Whether evicted results that can be made again are dropped rather than written back.
    Recompute recompute;

    /// The library's defaults.
    ResidencyConfig() {
        tr_residency_config c{};
        detail::call(tr_residency_config_default, &c);
        *this = ResidencyConfig(c);
    }

    /// The defaults with this policy and budget.
    ResidencyConfig(Policy policy_, uint64_t budget_bytes_) : ResidencyConfig() {
        policy = policy_;
        budget_bytes = budget_bytes_;
    }

    explicit ResidencyConfig(const tr_residency_config& c) noexcept
        : device(static_cast<Device>(c.device)),
          device_index(c.device_index),
          policy(static_cast<Policy>(c.policy)),
          budget_bytes(c.budget_bytes),
          pin_host_memory(c.pin_host_memory),
          prefetch_depth(c.prefetch_depth),
          simulated_capacity(c.simulated_capacity),
          recompute(static_cast<Recompute>(c.recompute)) {}

    tr_residency_config to_c() const noexcept {
        tr_residency_config c{};
        c.device = static_cast<tr_device>(device);
        c.device_index = device_index;
        c.policy = static_cast<tr_policy>(policy);
        c.budget_bytes = budget_bytes;
        c.pin_host_memory = pin_host_memory;
        c.prefetch_depth = prefetch_depth;
        c.simulated_capacity = simulated_capacity;
        c.recompute = static_cast<tr_recompute>(recompute);
        return c;
    }
};

}  // namespace tr

// tr::ResidencyStats, generated from the ABI manifest (TENSORREF_HPP_INSIDE is defined above).
#include "tensorref_stats_generated.hpp"

namespace tr {

/// One manager event (tr_event), as the callback receives it (tr::to_string(kind) names it).
struct Event {
    EventKind kind;
    /// The storage concerned (shared by aliases; not a handle), 0 for op events.
    uint64_t entry;
    uint64_t bytes;
    /// The manager's device bytes right after the event.
    uint64_t device_bytes;
    /// The op's name: static text, valid for the life of the process.
    const char* op;
    /// Microseconds since the manager was configured.
    double time_us;
    /// Duration of a transfer in microseconds (0 for op events).
    double duration_us;
};

/// Receives manager events; see Residency::set_callback for what it may and may not do.
using EventCallback = std::function<void(const Event&)>;

namespace detail {

/// Whether a tr::Residency is alive in this process.
inline std::atomic<bool>& residency_owned() {
    static std::atomic<bool> owned{false};
    return owned;
}

/// What a Residency shares with its callbacks: the first exception one of them threw.
struct ResidencyState {
    std::mutex mutex;
    std::exception_ptr error;

    void record(std::exception_ptr e) noexcept {
        try {
            std::lock_guard<std::mutex> lock(mutex);
            if (!error) error = std::move(e);
        } catch (...) {  // a failing lock: the exception is lost, nothing unwinds
        }
    }
};

/// One installed callback: the user pointer given to tr_residency_set_callback. A new sink is
/// made for every set_callback, so the library never sees a std::function being replaced.
struct EventSink {
    EventCallback fn;
    ResidencyState* state;
    std::atomic<bool> failed{false};
};

/// The C callback: calls the sink's function and catches everything it throws (nothing may
/// unwind into the library); after a throw the sink is silent.
inline void event_trampoline(const tr_event* e, void* user) noexcept {
    auto* sink = static_cast<EventSink*>(user);
    if (e == nullptr || sink == nullptr || sink->failed.load(std::memory_order_acquire)) return;
    try {
        Event event{static_cast<EventKind>(e->kind), e->entry, e->bytes, e->device_bytes,
                    e->op != nullptr ? e->op : "", e->time_us, e->duration_us};
        sink->fn(event);
    } catch (...) {
        sink->failed.store(true, std::memory_order_release);
        sink->state->record(std::current_exception());
    }
}

}  // namespace detail

/// Runs the process's residency manager while it lives: the constructor configures it
/// (tr_residency_configure), the destructor disables it (tr_residency_disable: newer device copies
/// are written back, every device copy is freed). Tensors outlive it and keep their values.
///
/// One at a time: the manager is process-wide, so constructing a second Residency while one lives
/// throws tr::Error (TR_ERR_INVALID_ARG); destroy the first one before. Configuring the manager
/// through the C ABI while a Residency lives replaces its manager (and drops its callback).
/// Move-constructible (a moved-from Residency disables nothing), not assignable.
///
/// Managed ops refuse autograd (tensors that require grad while grad mode is on): run them under
/// tr::NoGradGuard. The process-wide calls (stats, mark_iteration, timeline_start, timeline_write) are static: they
/// also work on a manager configured through the C ABI, and throw TR_ERR_INVALID_ARG without one.
class Residency {
  public:
    /// Configures the manager, then installs `on_event` (if given; see set_callback). Throws
    /// tr::Error: TR_ERR_INVALID_ARG (a Residency already lives, an unknown device or policy, a
    /// budget of 0 for Genoa or Flow), TR_ERR_DEVICE (no such CUDA device).
    explicit Residency(const ResidencyConfig& config, EventCallback on_event = nullptr)
        : state_(std::make_unique<detail::ResidencyState>()), config_(config) {
        detail::ensure_abi();
        bool expected = false;
        if (!detail::residency_owned().compare_exchange_strong(expected, true)) {
            throw Error(TR_ERR_INVALID_ARG,
                        "a tr::Residency is already active: the manager is process-wide, destroy it first");
        }
        tr_residency_config c = config.to_c();
        tr_status s = tr_residency_configure(&c);
        if (s != TR_OK) {
            Error e = Error::last(s);
            detail::residency_owned().store(false);
            throw e;
        }
        if (on_event) {
            try {
                set_callback(std::move(on_event));
            } catch (...) {
                (void)tr_residency_disable();
                detail::residency_owned().store(false);
                throw;
            }
        }
    }

    Residency(const Residency&) = delete;
    Residency& operator=(const Residency&) = delete;
    Residency& operator=(Residency&&) = delete;

    Residency(Residency&& other) noexcept
        : state_(std::move(other.state_)), sink_(std::move(other.sink_)), config_(other.config_),
          active_(other.active_) {
        other.active_ = false;
    }

    /// Disables the manager (never throws). Should that fail, the callback is removed anyway, so
    /// the library keeps no pointer into this object.
    ~Residency() {
        if (!active_) return;
        if (tr_residency_disable() != TR_OK) (void)tr_residency_set_callback(nullptr, nullptr);
        finish();
    }

    /// Disables the manager now; a second call does nothing. On failure it throws tr::Error and
    /// this Residency stays active (the destructor tries again).
    void disable() {
        if (!active_) return;
        detail::call(tr_residency_disable);
        finish();
    }

    /// Whether this object still runs the manager (not disabled, not moved from).
    bool active() const noexcept { return active_; }

    /// The configuration it was made with.
    const ResidencyConfig& config() const noexcept { return config_; }

    /// Calls `f` for every manager event (load, evict, write-back, prefetch, op begin/end); an
    /// empty `f` removes the callback. `f` runs on the thread whose op caused the event while the
    /// manager is locked, so it must be quick, must be safe to call from any thread that runs
    /// ops, and must not call libtensorref (that deadlocks). Whatever it throws is caught before
    /// it reaches the library: the op goes on, `f` is not called again, and
    /// rethrow_callback_error() throws the exception. When set_callback returns, the previous
    /// callback is no longer running and is destroyed.
    void set_callback(EventCallback f) {
        require_active();
        std::unique_ptr<detail::EventSink> next;
        if (f) {
            next = std::make_unique<detail::EventSink>();
            next->fn = std::move(f);
            next->state = state_.get();
        }
        tr_event_fn fn = next ? &detail::event_trampoline : nullptr;
        detail::call(tr_residency_set_callback, fn, static_cast<void*>(next.get()));
        sink_ = std::move(next);
    }

    /// Throws the first exception a callback threw since the last call (and forgets it); does
    /// nothing if none did. Also after disable(), so events during the final write-back count.
    void rethrow_callback_error() {
        if (!state_) return;
        std::exception_ptr e;
        {
            std::lock_guard<std::mutex> lock(state_->mutex);
            std::swap(e, state_->error);
        }
        if (e) std::rethrow_exception(e);
    }

    // ------------------------------------------------------------ process-wide

    /// Whether a manager is configured (by any object or language): tr_residency_enabled, which
    /// never fails and leaves the thread's last error alone.
    static bool enabled() {
        detail::ensure_abi();
        return tr_residency_enabled();
    }

    /// Whether the tensors autograd saves for backward go through the manager (a manager that
    /// moves data is configured, and backward runs on libtorch's engine):
    /// tr_residency_saved_tensors_managed, which never fails.
    static bool saved_tensors_managed() {
        detail::ensure_abi();
        return tr_residency_saved_tensors_managed();
    }

    /// The manager's counters.
    static ResidencyStats stats() {
        tr_residency_stats s{};
        detail::call(tr_residency_stats_get, &s);
        return ResidencyStats(s);
    }

    /// Marks the end of an iteration (a step, a forward pass): Flow evicts and prefetches by the
    /// ops since the previous mark.
    static void mark_iteration() { detail::call(tr_residency_mark_iteration); }

    /// Starts recording the manager's events for timeline_write.
    static void timeline_start() { detail::call(tr_residency_timeline_start); }

    /// Writes the recorded events to `path` as Chrome trace / Perfetto JSON (open it at
    /// ui.perfetto.dev). Throws TR_ERR_INVALID_ARG when no timeline was started, TR_ERR_IO when the
    /// path cannot be written, and TR_ERR_INVALID_ARG for a path holding a NUL.
    static void timeline_write(const std::string& path) {
        detail::call(tr_residency_timeline_write, detail::c_string(path, "the path"));
    }

  private:
    void require_active() const {
        if (!active_) throw Error(TR_ERR_INVALID_ARG, "this tr::Residency was disabled or moved from");
    }

    /// The manager is off and keeps no pointer into this object: drop the callback.
    void finish() noexcept {
        sink_.reset();
        active_ = false;
        detail::residency_owned().store(false);
    }

    std::unique_ptr<detail::ResidencyState> state_;  // outlives disable() for rethrow_callback_error
    std::unique_ptr<detail::EventSink> sink_;
    ResidencyConfig config_;
    bool active_ = true;
};

// ---------------------------------------------------------------- many releases at once

/// Releases every handle of `tensors` with one library call (tr_tensor_release_many: one lock for
/// the batch) and leaves each owner empty. Handles a scope already released are skipped quietly,
/// as ~Tensor does; any other failure throws tr::Error after every live handle was released.
inline void dispose_all(std::vector<Tensor>& tensors) {
    std::vector<tr_tensor> raw;
    raw.reserve(tensors.size());
    for (Tensor& t : tensors)
        if (t) raw.push_back(t.into_raw());
    if (raw.empty()) return;
    detail::ensure_abi();
    tr_status s = tr_tensor_release_many(raw.data(), raw.size());
    if (s != TR_OK && s != TR_ERR_STALE_HANDLE) throw Error::last(s);
}

// ---------------------------------------------------------------- weights files

/// The tensors of one safetensors file (tr_weights_load), by name and in file order, in host
/// memory. They are ordinary tensors: created while a scope is open, that scope owns them too.
/// Destroying the Weights (or dispose()) releases those it still holds in one library call;
/// take() hands one over to the caller. Move-only.
class Weights {
  public:
    Weights() = default;
    Weights(Weights&&) noexcept = default;
    Weights& operator=(Weights&& other) noexcept {
        if (this != &other) {
            release_quietly();
            names_ = std::move(other.names_);
            tensors_ = std::move(other.tensors_);
            index_ = std::move(other.index_);
        }
        return *this;
    }
    ~Weights() { release_quietly(); }

    /// Loads every tensor of the file at `path`. Throws tr::Error: TR_ERR_IO (missing or
    /// unreadable file), TR_ERR_FORMAT (truncated or corrupt), TR_ERR_DTYPE (a dtype libtensorref
    /// has no type for), each with the library's message.
    [[nodiscard]] static Weights load(const std::string& path) {
        detail::ensure_abi();
        // The sizing call reads the header only (TR_ERR_BUFFER_TOO_SMALL with the sizes; TR_OK for
        // a file without tensors). Should the file change before the load, that answers
        // TR_ERR_BUFFER_TOO_SMALL with the new sizes: try again.
        size_t count = 0, names_len = 0;
        const char* c_path = detail::c_string(path, "the path");
        tr_status s = tr_weights_load(c_path, nullptr, 0, nullptr, 0, &count, &names_len);
        if (s != TR_OK && s != TR_ERR_BUFFER_TOO_SMALL) throw Error::last(s);
        for (int attempt = 0;; attempt++) {
            std::vector<tr_tensor> raw(count, tr_tensor{0});
            std::string names(names_len, '\0');
            s = tr_weights_load(c_path, raw.data(), raw.size(), names.empty() ? nullptr : &names[0],
                                names.size(), &count, &names_len);
            if (s == TR_ERR_BUFFER_TOO_SMALL && attempt < 3) continue;
            if (s != TR_OK) throw Error::last(s);
            Weights w;
            w.tensors_.reserve(raw.size());
            for (tr_tensor h : raw) w.tensors_.push_back(Tensor::adopt(h));
            size_t at = 0;
            for (size_t i = 0; i < raw.size(); i++) {
                size_t end = names.find('\0', at);
                if (end == std::string::npos) throw Error(TR_ERR_FORMAT, "tr_weights_load gave fewer names than tensors");
                w.names_.push_back(names.substr(at, end - at));
                w.index_.emplace(w.names_.back(), i);
                at = end + 1;
            }
            if (at != names.size()) throw Error(TR_ERR_FORMAT, "tr_weights_load gave more names than tensors");
            return w;
        }
    }

    size_t size() const noexcept { return tensors_.size(); }
    bool empty() const noexcept { return tensors_.empty(); }

    /// The names in file order.
    const std::vector<std::string>& names() const noexcept { return names_; }

    /// The i-th tensor in file order (an empty Tensor once taken or disposed).
    const Tensor& operator[](size_t i) const { return tensors_.at(i); }

    /// The tensor called `name`, or nullptr.
    const Tensor* find(const std::string& name) const {
        auto it = index_.find(name);
        return it == index_.end() ? nullptr : &tensors_[it->second];
    }

    bool contains(const std::string& name) const { return index_.count(name) != 0; }

    /// The tensor called `name`; throws std::out_of_range if the file has none.
    const Tensor& at(const std::string& name) const {
        const Tensor* t = find(name);
        if (!t) throw std::out_of_range("no tensor named '" + name + "' in these weights");
        return *t;
    }

    /// Hands the tensor called `name` to the caller (its slot here is left empty); throws
    /// std::out_of_range if the file has none.
    [[nodiscard]] Tensor take(const std::string& name) {
        at(name);
        return std::move(tensors_[index_.at(name)]);
    }

    /// Bytes of the tensors still held (element count times element size).
    uint64_t bytes() const {
        uint64_t total = 0;
        for (const Tensor& t : tensors_)
            if (t) total += uint64_t(t.numel()) * dtype_size(t.dtype());
        return total;
    }

    /// Releases every tensor still held now, in one library call (see tr::dispose_all).
    void dispose() { dispose_all(tensors_); }

  private:
    static uint64_t dtype_size(DType d) noexcept {
        switch (d) {
            case DType::U8: case DType::I8: case DType::Bool: return 1;
            case DType::I16: case DType::F16: case DType::Bf16: return 2;
            case DType::I32: case DType::F32: return 4;
            default: return 8;
        }
    }

    void release_quietly() noexcept {
        try {
            dispose_all(tensors_);
        } catch (...) {
        }
    }

    std::vector<std::string> names_;
    std::vector<Tensor> tensors_;
    std::unordered_map<std::string, size_t> index_;
};

}  // namespace tr

#include "tensorref_functions_generated.hpp"
#include "tensorref_operators_generated.hpp"
#undef TENSORREF_HPP_INSIDE

#endif  // TENSORREF_HPP

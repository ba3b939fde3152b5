// Element types, and the argument lists and scalars the ops take.
// Part of tensorref.hpp, which includes the parts in order: include that header, not this one.
#ifndef TENSORREF_ARGUMENTS_HPP
#define TENSORREF_ARGUMENTS_HPP
#ifndef TENSORREF_HPP_INSIDE
#error "include tensorref.hpp, which includes this part"
#endif

namespace tr {

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

namespace detail {

/// The C form of an optional argument (`const T *`, NULL for none): a copy of the value, which
/// lives until the end of the call it is made in.
template <class C>
struct COptional {
    std::optional<C> value;
    const C* ptr() const noexcept { return value ? &*value : nullptr; }
};
template <class T>
COptional<T> c_opt(const std::optional<T>& v) {
    return {v};
}
inline COptional<tr_dtype> c_opt(const std::optional<DType>& v) {
    return {v ? std::optional<tr_dtype>(static_cast<tr_dtype>(*v)) : std::nullopt};
}
inline COptional<tr_scalar> c_opt(const std::optional<Scalar>& v) {
    return {v ? std::optional<tr_scalar>(v->raw()) : std::nullopt};
}

/// The handles of a list of optional tensors (0 for none), for the length of a call.
inline std::vector<tr_tensor> raw_ids(const std::vector<OptionalTensor>& list) {
    std::vector<tr_tensor> ids;
    ids.reserve(list.size());
    for (const OptionalTensor& t : list) ids.push_back(t.raw());
    return ids;
}

}  // namespace detail
}  // namespace tr

#endif  // TENSORREF_ARGUMENTS_HPP

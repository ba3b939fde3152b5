// tr::Tensor: one owned reference to a tensor handle.
// Part of tensorref.hpp, which includes the parts in order: include that header, not this one.
#ifndef TENSORREF_TENSOR_HPP
#define TENSORREF_TENSOR_HPP
#ifndef TENSORREF_HPP_INSIDE
#error "include tensorref.hpp, which includes this part"
#endif

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

    /// Where the memory is: Device::Cpu (host memory) or Device::Cuda (`device_index` says which).
    Device device() const {
        tr_device d = TR_DEVICE_CPU;
        int32_t index = 0;
        detail::call(tr_tensor_device, h_, &d, &index);
        return static_cast<Device>(d);
    }

    /// The CUDA device number of a tensor on Device::Cuda; 0 for host memory.
    int32_t device_index() const {
        tr_device d = TR_DEVICE_CPU;
        int32_t index = 0;
        detail::call(tr_tensor_device, h_, &d, &index);
        return index;
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

}  // namespace tr

#endif  // TENSORREF_TENSOR_HPP

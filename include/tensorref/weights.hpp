// Releasing many tensors at once, and safetensors weights files (tr::Weights).
// Part of tensorref.hpp, which includes the parts in order: include that header, not this one.
#ifndef TENSORREF_WEIGHTS_HPP
#define TENSORREF_WEIGHTS_HPP
#ifndef TENSORREF_HPP_INSIDE
#error "include tensorref.hpp, which includes this part"
#endif

namespace tr {

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

#endif  // TENSORREF_WEIGHTS_HPP

// Dispose scopes (tr::Scope, tr::ScopeRef) and the scope statistics.
// Part of tensorref.hpp, which includes the parts in order: include that header, not this one.
#ifndef TENSORREF_SCOPES_HPP
#define TENSORREF_SCOPES_HPP
#ifndef TENSORREF_HPP_INSIDE
#error "include tensorref.hpp, which includes this part"
#endif

namespace tr {

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

}  // namespace tr

#endif  // TENSORREF_SCOPES_HPP

// The residency manager (tr::Residency): events, statistics, iteration marks, timelines.
// Part of tensorref.hpp, which includes the parts in order: include that header, not this one.
#ifndef TENSORREF_RESIDENCY_HPP
#define TENSORREF_RESIDENCY_HPP
#ifndef TENSORREF_HPP_INSIDE
#error "include tensorref.hpp, which includes this part"
#endif

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

}  // namespace tr

#endif  // TENSORREF_RESIDENCY_HPP

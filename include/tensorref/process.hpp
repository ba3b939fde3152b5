// Process-wide helpers: live handles and bytes, the seed, grad mode.
// Part of tensorref.hpp, which includes the parts in order: include that header, not this one.
#ifndef TENSORREF_PROCESS_HPP
#define TENSORREF_PROCESS_HPP
#ifndef TENSORREF_HPP_INSIDE
#error "include tensorref.hpp, which includes this part"
#endif

namespace tr {

// ---------------------------------------------------------------- process-wide helpers

/// The number of live tensor handles in the process (all threads): for leak checks.
inline size_t live_handles() {
    detail::ensure_abi();
    return tr_live_handles();
}

/// Logical bytes held by live handles on a device: Device::Cpu (host memory), or Device::Cuda
/// with its number.
inline uint64_t live_bytes(Device device = Device::Cpu, int32_t index = 0) {
    detail::ensure_abi();
    uint64_t n = 0;
    detail::call(tr_live_bytes, static_cast<tr_device>(device), index, &n);
    return n;
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

}  // namespace tr

#endif  // TENSORREF_PROCESS_HPP

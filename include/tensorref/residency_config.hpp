// The residency manager's configuration (tr::ResidencyConfig).
// Part of tensorref.hpp, which includes the parts in order: include that header, not this one.
#ifndef TENSORREF_RESIDENCY_CONFIG_HPP
#define TENSORREF_RESIDENCY_CONFIG_HPP
#ifndef TENSORREF_HPP_INSIDE
#error "include tensorref.hpp, which includes this part"
#endif

namespace tr {

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

#endif  // TENSORREF_RESIDENCY_CONFIG_HPP

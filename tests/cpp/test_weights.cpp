// tr::Weights against the model's own safetensors file, read independently (model_files.hpp):
// every name, dtype and shape is the file's, the bytes are the file's, and they add up to the data
// section. Missing, truncated and corrupt files throw tr::Error with TR_ERR_IO / TR_ERR_FORMAT and
// the library's message. Destroying the Weights (one tr_tensor_release_many), dispose(), a scope
// and take() each leave every handle released exactly once; tr::dispose_all on its own; and
// Residency::enabled (tr_residency_enabled). The harness checks that no handle leaked.
#include "tensorref.hpp"

#include "harness.hpp"
#include "model_files.hpp"

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

using tr::Tensor;
using tr::Weights;

static_assert(!std::is_copy_constructible_v<Weights> && std::is_nothrow_move_constructible_v<Weights>);

namespace {

std::vector<float> file_floats(const std::string& path, uint64_t at, size_t count) {
    std::string bytes = model_files::read_bytes(path, at, count * sizeof(float));
    std::vector<float> v(count);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
}

}  // namespace

TEST(weights_load_gives_every_tensor_of_the_file) {
    const std::string path = model_files::safetensors();
    model_files::Header header(path);
    size_t live = tr_live_handles();
    {
        Weights w = Weights::load(path);
        CHECK_EQ(w.size(), header.count());
        CHECK_EQ(tr_live_handles(), live + header.count());
        CHECK_EQ(w.at("embeddings.word_embeddings.weight").shape(), (std::vector<int64_t>{30522, 384}));
        CHECK_EQ(w.at("embeddings.position_embeddings.weight").shape(), (std::vector<int64_t>{512, 384}));
        CHECK_EQ(w.at("encoder.layer.5.intermediate.dense.weight").shape(), (std::vector<int64_t>{1536, 384}));
        // Every entry as the header has it, in data order (file order).
        uint64_t previous_end = 0;
        for (size_t i = 0; i < w.size(); i++) {
            const std::string& name = w.names()[i];
            model_files::Entry e = header.entry(name);
            CHECK_EQ(w[i].shape(), e.shape);
            CHECK_EQ(w[i].dtype(), e.dtype == "F32" ? tr::DType::F32 : tr::DType::I64);
            CHECK_EQ(e.begin, previous_end);
            previous_end = e.end;
            CHECK(&w.at(name) == &w[i]);
        }
        CHECK_EQ(w.bytes(), model_files::read_bytes(path).size() - header.data_start);
        // The bytes are the file's: a small tensor, and the last rows of the largest one.
        model_files::Entry ln = header.entry("embeddings.LayerNorm.weight");
        CHECK_EQ(w.at("embeddings.LayerNorm.weight").to_vector<float>(), file_floats(path, header.data_start + ln.begin, 384));
        model_files::Entry we = header.entry("embeddings.word_embeddings.weight");
        std::vector<float> table = w.at("embeddings.word_embeddings.weight").to_vector<float>();
        std::vector<float> tail(table.end() - 3 * 384, table.end());
        CHECK(tail == file_floats(path, header.data_start + we.end - 3 * 384 * 4, 3 * 384));
        CHECK(w.find("no.such.tensor") == nullptr && !w.contains("no.such.tensor"));
        bool threw = false;
        try {
            (void)w.at("no.such.tensor");
        } catch (const std::out_of_range&) {
            threw = true;
        }
        CHECK(threw);
    }
    CHECK_EQ(tr_live_handles(), live);
}

TEST(weights_dispose_take_move_and_scopes_release_each_handle_once) {
    const std::string path = model_files::safetensors();
    size_t live = tr_live_handles();
    Tensor kept;
    {
        Weights w = Weights::load(path);
        kept = w.take("embeddings.LayerNorm.bias");
        CHECK(!w.at("embeddings.LayerNorm.bias"));  // its slot is empty now
        Weights moved = std::move(w);
        CHECK(w.empty() && moved.size() > 100);
        moved.dispose();
        CHECK_EQ(tr_live_handles(), live + 1);
        CHECK(!moved.at("embeddings.LayerNorm.weight"));
        moved.dispose();  // nothing left
    }
    CHECK_EQ(kept.numel(), size_t(384));
    kept = Tensor();
    CHECK_EQ(tr_live_handles(), live);

    // Loaded inside a scope: the scope owns them too; whoever goes first releases.
    Weights outlives;
    {
        tr::Scope scope;
        outlives = Weights::load(path);
        CHECK_EQ(scope.size(), outlives.size());
        outlives.at("embeddings.LayerNorm.weight").move_to_outer_scope();
    }
    CHECK_EQ(tr_live_handles(), live + 1);
    CHECK(!outlives.at("embeddings.LayerNorm.bias").is_valid());
    CHECK_THROWS(outlives.at("embeddings.LayerNorm.bias").numel(), TR_ERR_STALE_HANDLE, "");
    outlives.dispose();  // the scope's releases are skipped quietly; the moved-out one is released
    CHECK_EQ(tr_live_handles(), live);
}

TEST(weights_missing_truncated_and_corrupt_files_throw) {
    const std::string path = model_files::safetensors();
    model_files::Header header(path);
    CHECK_THROWS(Weights::load("/nonexistent/model.safetensors"), TR_ERR_IO, "/nonexistent/model.safetensors");
    model_files::TempFile cut_header(model_files::read_bytes(path, 0, 1000));
    CHECK_THROWS(Weights::load(cut_header.path), TR_ERR_FORMAT, "");
    model_files::TempFile cut_data(model_files::read_bytes(path, 0, header.data_start + 4096));
    CHECK_THROWS(Weights::load(cut_data.path), TR_ERR_FORMAT, "");
    model_files::TempFile garbage("this is not a safetensors file at all");
    CHECK_THROWS(Weights::load(garbage.path), TR_ERR_FORMAT, "");
    model_files::TempFile empty("");
    CHECK_THROWS(Weights::load(empty.path), TR_ERR_FORMAT, "");
}

namespace {

/// A safetensors file of one float32 [1] tensor per name.
std::string safetensors_named(const std::vector<std::string>& names) {
    std::string json = "{";
    for (size_t i = 0; i < names.size(); i++) {
        std::string escaped;
        for (char c : names[i]) escaped += c == '\0' ? std::string("\\u0000") : std::string(1, c);
        json += (i ? "," : "") + std::string("\"") + escaped + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
                std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    }
    json += "}";
    std::string file(8, '\0');
    for (int b = 0; b < 8; b++) file[b] = static_cast<char>((json.size() >> (8 * b)) & 0xff);
    return file + json + std::string(4 * names.size(), '\0');
}

}  // namespace

// Names travel NUL-separated through the C ABI: a name holding a NUL would split and shift every
// later name, so the library refuses the file; a path holding one would be cut short.
TEST(weights_with_a_nul_in_a_name_or_the_path_are_refused) {
    model_files::TempFile good(safetensors_named({"a", "c"}));
    Weights loaded = Weights::load(good.path);
    CHECK_EQ(loaded.names(), (std::vector<std::string>{"a", "c"}));
    model_files::TempFile nul(safetensors_named({std::string("a\0b", 3), "c"}));
    CHECK_THROWS(Weights::load(nul.path), TR_ERR_FORMAT, "NUL");
    CHECK_THROWS(Weights::load(good.path + std::string("\0x", 2)), TR_ERR_INVALID_ARG, "NUL");
    CHECK_THROWS(Weights::load("/tmp"), TR_ERR_IO, "is a directory");
}

TEST(dispose_all_releases_in_one_call) {
    size_t live = tr_live_handles();
    std::vector<Tensor> ts;
    for (int i = 0; i < 3; i++) ts.push_back(tr::zeros({2}));
    ts.push_back(Tensor());  // empty owners are skipped
    tr_tensor raw = ts[0].raw();
    CHECK_EQ(tr_live_handles(), live + 3);
    tr::dispose_all(ts);
    CHECK_EQ(tr_live_handles(), live);
    for (const Tensor& t : ts) CHECK(!t);
    bool valid = true;
    CHECK_EQ(tr_tensor_is_valid(raw, &valid), TR_OK);
    CHECK(!valid);
    tr::dispose_all(ts);  // nothing left: no call, no error
}

TEST(residency_enabled_never_touches_the_last_error) {
    CHECK_THROWS(tr::Residency::mark_iteration(), TR_ERR_INVALID_ARG, "");
    std::string before = tr::Error::last_message();
    CHECK(!tr::Residency::enabled());
    CHECK_EQ(tr::Error::last_message(), before);
    {
        tr::Residency r(tr::ResidencyConfig(tr::Policy::Flow, 1 << 20));
        CHECK(tr::Residency::enabled());
    }
    CHECK(!tr::Residency::enabled());
}

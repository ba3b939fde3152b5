// tr::MiniLM on the real all-MiniLM-L6-v2: embeddings are unit length, a paraphrase pair is close
// (cosine > 0.5) and an unrelated pair is not (< 0.2); under Flow with a device budget of a quarter
// of the weights, page and chunk modes give embeddings identical to the unmanaged run with the
// peak device bytes (the manager's counter and every event seen by the callback) within the
// budget, chunk pinning weights and loading fewer bytes than page. Errors carry the library's
// statuses; a moved-from model owns nothing, and a freed model pointer is refused, not freed
// twice. Two model loads in all (about 90 MB each). tr::MiniLM is the add-on header's
// (tensorref_minilm.hpp).
#include "tensorref_minilm.hpp"

#include "harness.hpp"
#include "model_files.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

using tr::MiniLM;
using tr::MiniLMOptions;
using tr::WeightMode;

static_assert(!std::is_copy_constructible_v<MiniLM> && std::is_nothrow_move_constructible_v<MiniLM>);

namespace {

const std::vector<std::string> kSentences = {
    "A man is playing a guitar.",
    "Someone strums a guitar.",
    "The stock market fell sharply.",
};

double dot(const std::vector<float>& a, const std::vector<float>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += double(a[i]) * b[i];
    return s;
}

MiniLM load(uint32_t batch_size) {
    MiniLMOptions o;
    o.batch_size = batch_size;  // 3 sentences: a full batch and a partial one
    return MiniLM(model_files::dir(), o);
}

struct Run {
    std::vector<float> embeddings;
    tr::ResidencyStats stats;
    uint64_t max_event_device_bytes = 0;
};

Run managed(const MiniLM& m, uint64_t budget) {
    Run run;
    tr::Residency r(tr::ResidencyConfig(tr::Policy::Flow, budget), [&run](const tr::Event& e) {
        if (e.device_bytes > run.max_event_device_bytes) run.max_event_device_bytes = e.device_bytes;
    });
    run.embeddings = m.embed_flat(kSentences);
    run.stats = tr::Residency::stats();
    r.disable();
    r.rethrow_callback_error();
    return run;
}

}  // namespace

TEST(minilm_embeddings_are_unit_length_and_paraphrases_close) {
    MiniLMOptions defaults;
    CHECK_EQ(defaults.weight_mode, WeightMode::Page);
    CHECK_EQ(defaults.max_seq_length, 256u);
    MiniLM m = load(2);
    CHECK_EQ(m.dim(), size_t(384));
    model_files::Header header(model_files::safetensors());
    CHECK_EQ(m.weight_bytes(), model_files::read_bytes(model_files::safetensors()).size() - header.data_start);
    std::vector<std::vector<float>> e = m.embed(kSentences);
    REQUIRE(e.size() == 3);
    for (const auto& row : e) {
        CHECK_EQ(row.size(), size_t(384));
        CHECK(std::fabs(std::sqrt(dot(row, row)) - 1.0) < 1e-5);
    }
    double close = dot(e[0], e[1]), far = dot(e[0], e[2]);
    std::printf("  cosine: guitar/guitar %.4f, guitar/stocks %.4f\n", close, far);
    CHECK(close > 0.5);
    CHECK(far < 0.2);
    // A sentence alone embeds as in a padded batch (the mask hides the padding).
    std::vector<float> alone = m.embed_flat({kSentences[1]});
    double diff = 0;
    for (size_t i = 0; i < alone.size(); i++) diff = std::fmax(diff, std::fabs(alone[i] - e[1][i]));
    CHECK(diff <= 1e-5);
}

TEST(minilm_page_and_chunk_under_a_quarter_budget_match_the_unmanaged_run) {
    MiniLM m = load(2);
    std::vector<float> unmanaged = m.embed_flat(kSentences);
    uint64_t budget = m.weight_bytes() / 4, capacity = budget / 2;
    Run page = managed(m, budget);
    m.set_weight_mode(WeightMode::Chunk, capacity);
    Run chunk = managed(m, budget);
    for (const Run* r : {&page, &chunk}) {
        const char* name = r == &page ? "page" : "chunk";
        std::printf("  Flow %-5s budget %llu B: peak %llu B (events: %llu B), loaded %llu B, pinned %llu B, prefetch hits %llu\n",
                    name, (unsigned long long)budget, (unsigned long long)r->stats.peak_device_bytes,
                    (unsigned long long)r->max_event_device_bytes, (unsigned long long)r->stats.load_bytes,
                    (unsigned long long)r->stats.pinned_bytes, (unsigned long long)r->stats.prefetch_hits);
        CHECK(r->embeddings == unmanaged);  // bit for bit
        CHECK(r->stats.peak_device_bytes > 0 && r->stats.peak_device_bytes <= budget);
        CHECK(r->max_event_device_bytes <= budget);
        CHECK(r->stats.loads > 0);
    }
    CHECK_EQ(page.stats.pinned_bytes, 0u);
    CHECK(chunk.stats.pinned_bytes > 0 && chunk.stats.pinned_bytes <= capacity);
    // Flow's learned order already keeps what is reused, so chunk's pins need not load less
    // (tests/minilm.rs compares the two under Genoa, which keeps nothing): they are loaded once.
    CHECK(chunk.stats.load_bytes >= chunk.stats.pinned_bytes);
}

TEST(minilm_errors_carry_the_library_status) {
    CHECK_THROWS(MiniLM("/nonexistent/minilm"), TR_ERR_IO, "");
    MiniLMOptions zero;
    zero.batch_size = 0;
    CHECK_THROWS(MiniLM(model_files::dir(), zero), TR_ERR_INVALID_ARG, "");
    MiniLMOptions one_token;
    one_token.max_seq_length = 1;
    CHECK_THROWS(MiniLM(model_files::dir(), one_token), TR_ERR_INVALID_ARG, "");

    MiniLM m = load(2);
    CHECK_THROWS(m.embed({}), TR_ERR_INVALID_ARG, "");
    CHECK_THROWS(m.set_weight_mode(static_cast<WeightMode>(7)), TR_ERR_INVALID_ARG, "");
    CHECK_THROWS(m.embed({std::string("nul\0inside", 10)}), TR_ERR_INVALID_ARG, "NUL");
    {
        tr::Residency r(tr::ResidencyConfig(tr::Policy::Flow, 1 << 20));
        CHECK_THROWS(m.embed({"too small a budget"}), TR_ERR_BUDGET_TOO_SMALL, "");
    }
    tr_minilm* raw = m.raw();
    MiniLM moved = std::move(m);
    CHECK(!m && moved && moved.raw() == raw);
    CHECK_THROWS(m.dim(), TR_ERR_NULL_ARG, "");
    moved = MiniLM(model_files::dir());  // the first model is freed on assignment
    size_t dim = 0;
    CHECK_EQ(tr_minilm_dim(raw, &dim), TR_ERR_INVALID_HANDLE);
    CHECK_EQ(tr_minilm_free(raw), TR_ERR_INVALID_HANDLE);  // freed already: refused, not freed twice
    CHECK_EQ(tr_minilm_free(nullptr), TR_OK);
}

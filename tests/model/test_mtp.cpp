// Multi-token-prediction (nextn) layers: the MTP forward of tiny DeepSeek-V3 and GLM-4 MoE
// checkpoints against transformers' own decoder layers plus the enorm / hnorm / eh_proj /
// shared_head ops in torch (scripts/make_mtp_reference.py, tests/golden/models/*.mtp.json):
// every row's logits over the prompt from the target's hidden states, and a chain of rows fed
// the layer's own output. MtpProposer proposes the reference's chain from the target's hidden
// states, and a model without nextn layers is refused with a clear error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "engine/speculative/mtp_proposer.h"
#include "formats/safetensors_file.h"
#include "kv/kv_cache.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "util/error.h"
#include "util/json_file.h"

using namespace warden;
namespace fs = std::filesystem;

namespace {

const std::string kGolden = std::string(WARDEN_SOURCE_DIR) + "/tests/golden/models/";

// The golden directory holds the MTP layer only; the loadable checkpoint is the base model's
// weights and the MTP layer as two shards (as make_mtp_reference.py's mtp_checkpoint()).
std::string mtp_checkpoint(const std::string& name, const std::string& base) {
    const fs::path out =
        fs::temp_directory_path() / ("warden_mtp_" + name + "_" + std::to_string(getpid()));
    fs::create_directories(out);
    fs::copy_file(kGolden + name + "/config.json", out / "config.json",
                  fs::copy_options::overwrite_existing);
    nlohmann::json wm = nlohmann::json::object();
    const std::pair<std::string, std::string> shards[] = {
        {"model-00001-of-00002.safetensors", kGolden + base + "/model.safetensors"},
        {"model-00002-of-00002.safetensors", kGolden + name + "/mtp.safetensors"}};
    for (const auto& [shard, src] : shards) {
        fs::remove(out / shard);
        fs::create_symlink(src, out / shard);
        formats::SafetensorsModel st({src});
        for (const auto& t : st.tensors()) wm[t.name] = shard;
    }
    std::ofstream(out / "model.safetensors.index.json")
        << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", wm}}.dump();
    return out.string();
}

struct Fixture {
    util::ThreadPool pool{2};
    std::string dir;
    std::unique_ptr<model::Model> target, mtp;
    nlohmann::json golden;

    Fixture(const std::string& name, const std::string& base) {
        dir = mtp_checkpoint(name, base);
        model::LoadOptions o;
        o.dtype = model::RuntimeDType::F32;
        target = model::load_model(dir, o, pool);
        mtp = model::load_mtp_model(*target, o, pool);
        golden = util::read_json_file(kGolden + name + ".mtp.json");
    }
    ~Fixture() { fs::remove_all(dir); }

    // The target's final hidden states of every prompt position, and its greedy next token.
    std::vector<float> target_hidden(const std::vector<int32_t>& ids, int32_t& next) {
        const model::ModelConfig& c = target->config;
        model::Transformer tf(*target, pool);
        model::ContiguousKvCache cache(c, 256, tensor::KvType::F32);
        std::vector<float> h(ids.size() * static_cast<size_t>(c.d_model));
        std::vector<float> logits(static_cast<size_t>(c.vocab_size));
        model::SeqInput in;
        in.tokens = ids;
        in.page_ids = cache.page_ids();
        in.logits = logits.data();
        in.hidden_out = h.data();
        tf.step(std::span<const model::SeqInput>(&in, 1), cache.storage());
        next = engine::Sampler::argmax(logits);
        return h;
    }
};

double max_rel(std::span<const float> got, const nlohmann::json& want, double spread) {
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
        worst = std::max(worst, std::abs(got[i] - want[i].get<double>()) / spread);
    return worst;
}

void check_forward(const std::string& name, const std::string& base) {
    Fixture f(name, base);
    const model::ModelConfig& c = f.mtp->config;
    const int64_t d = c.d_model, V = c.vocab_size;
    ASSERT_EQ(c.n_layers, 1);
    ASSERT_EQ(f.target->config.nextn.n_layers, 1);
    for (const auto& p : f.golden["prompts"]) {
        const auto ids = p["ids"].get<std::vector<int32_t>>();
        int32_t next = -1;
        const std::vector<float> h = f.target_hidden(ids, next);
        ASSERT_EQ(next, p["target_next"].get<int32_t>()) << name;
        // Rows 0..n-1: token t[p+1] (the last one the target's next) with the target's h[p].
        std::vector<int32_t> toks(ids.begin() + 1, ids.end());
        toks.push_back(next);
        const auto n = static_cast<int64_t>(toks.size());
        model::Transformer tf(*f.mtp, f.pool);
        model::ContiguousKvCache cache(c, 256, tensor::KvType::F32);
        std::vector<float> logits(static_cast<size_t>(n * V)), out(static_cast<size_t>(n * d));
        model::SeqInput in;
        in.tokens = toks;
        in.page_ids = cache.page_ids();
        in.logits = logits.data();
        in.all_logits = true;
        in.hidden_in = h.data();
        in.hidden_out = out.data();
        tf.step(std::span<const model::SeqInput>(&in, 1), cache.storage());
        const auto& want = p["logits"];
        const auto& spread = p["spread"];
        for (int64_t r = 0; r < n; ++r)
            EXPECT_LE(max_rel(std::span<const float>(logits.data() + r * V, static_cast<size_t>(V)),
                              want[static_cast<size_t>(r)], spread[static_cast<size_t>(r)]),
                      1e-4)
                << name << " row " << r;
        // The chain: each row takes the previous row's argmax and block output.
        const auto chain = p["chain"].get<std::vector<int32_t>>();
        std::vector<float> row(logits.end() - V, logits.end());
        std::vector<float> hid(out.end() - d, out.end());
        for (size_t j = 0; j < chain.size(); ++j) {
            const int32_t t = engine::Sampler::argmax(row);
            ASSERT_EQ(t, chain[j]) << name << " chain step " << j;
            if (j + 1 == chain.size()) break;
            std::vector<float> o2(static_cast<size_t>(d));
            model::SeqInput s;
            s.tokens = std::span<const int32_t>(&t, 1);
            s.pos0 = n + static_cast<int64_t>(j);
            s.page_ids = cache.page_ids();
            s.logits = row.data();
            s.hidden_in = hid.data();
            s.hidden_out = o2.data();
            tf.step(std::span<const model::SeqInput>(&s, 1), cache.storage());
            EXPECT_LE(
                max_rel(row, want[static_cast<size_t>(n) + j], spread[static_cast<size_t>(n) + j]),
                1e-4)
                << name << " chained row " << j;
            hid = o2;
        }
    }
}

}  // namespace

TEST(Mtp, DeepseekV3ForwardMatchesReference) {
    check_forward("tiny-deepseek-v3-mtp", "tiny-deepseek-v3");
}

TEST(Mtp, Glm4MoeForwardMatchesReference) {
    check_forward("tiny-glm4-moe-mtp", "tiny-glm4-moe");
}

// Without its own embed_tokens / shared_head.head (the GLM checkpoint) the MTP layer uses the
// target's matrices (aliases: the same bytes); with them (the DeepSeek one), its own.
TEST(Mtp, SharesTheTargetsEmbeddingsAndHeadOnlyWhenItHasNone) {
    Fixture g("tiny-glm4-moe-mtp", "tiny-glm4-moe");
    EXPECT_EQ(g.mtp->weights.output.view().data, g.target->weights.output.view().data);
    EXPECT_EQ(g.mtp->weights.token_embd.view().data, g.target->weights.token_embd.view().data);
    Fixture d("tiny-deepseek-v3-mtp", "tiny-deepseek-v3");
    EXPECT_NE(d.mtp->weights.output.view().data, d.target->weights.output.view().data);
    EXPECT_NE(d.mtp->weights.token_embd.view().data, d.target->weights.token_embd.view().data);
}

// The proposer, fed the target's hidden states of a prompt, proposes the reference's chain; the
// MTP layer's pages come from the target's pool and all go back on release.
TEST(Mtp, ProposerDraftsTheReferenceChain) {
    for (const auto& [name, base] :
         {std::pair<std::string, std::string>{"tiny-deepseek-v3-mtp", "tiny-deepseek-v3"},
          {"tiny-glm4-moe-mtp", "tiny-glm4-moe"}}) {
        Fixture f(name, base);
        const model::ModelConfig& c = f.target->config;
        const model::KvShape sh = c.kv_shape();
        kv::KvCacheConfig kc = kv::KvCacheConfig::shaped(c.n_layers, sh.n_kv_heads, sh.head_dim,
                                                         tensor::KvType::F32, 16);
        kc.k_only = sh.k_only;
        kc.budget_bytes = kv::kv_budget_for_tokens(kc, 512);
        kv::KvCache kv(kc);
        const int64_t free0 = kv.pool().free_pages();
        engine::speculative::MtpProposer prop(std::move(f.mtp), kv, f.pool);
        int64_t sid = 1;
        for (const auto& p : f.golden["prompts"]) {
            const auto ids = p["ids"].get<std::vector<int32_t>>();
            int32_t next = -1;
            const std::vector<float> h = f.target_hidden(ids, next);
            const kv::SeqId id{sid++};
            prop.observe_hidden(id, 0, ids, h.data());
            std::vector<int32_t> tokens = ids;
            tokens.push_back(next);
            const auto chain = p["chain"].get<std::vector<int32_t>>();
            engine::speculative::DraftRequest r;
            r.id = id;
            r.tokens = tokens;
            r.n_prompt = static_cast<int64_t>(ids.size());
            r.k = static_cast<int32_t>(chain.size());
            engine::speculative::DraftRequest* rp = &r;
            prop.propose(std::span<engine::speculative::DraftRequest*>(&rp, 1));
            EXPECT_EQ(r.draft, chain) << name;
            EXPECT_GT(prop.pages_held(), 0);
            // Asked again with nothing new, it reruns its last final row: the same drafts.
            prop.propose(std::span<engine::speculative::DraftRequest*>(&rp, 1));
            EXPECT_EQ(r.draft, chain) << name << " (again)";
        }
        EXPECT_EQ(prop.stats().no_hidden, 0);
        prop.release(kv::SeqId{1});
        prop.release(kv::SeqId{2});
        EXPECT_EQ(prop.pages_held(), 0);
        EXPECT_EQ(kv.pool().free_pages(), free0);
    }
}

// After a verify step that kept some drafts (rollback to the accepted length, the target's own
// token after them), the proposer's incremental state proposes exactly what a fresh proposer fed
// the whole verified sequence at once does (row results do not depend on how rows are grouped).
TEST(Mtp, ProposalsAfterPartialAcceptanceEqualAFreshStart) {
    Fixture f("tiny-deepseek-v3-mtp", "tiny-deepseek-v3");
    auto fresh = model::load_mtp_model(
        *f.target,
        [] {
            model::LoadOptions o;
            o.dtype = model::RuntimeDType::F32;
            return o;
        }(),
        f.pool);
    const model::ModelConfig& c = f.target->config;
    const model::KvShape sh = c.kv_shape();
    kv::KvCacheConfig kc =
        kv::KvCacheConfig::shaped(c.n_layers, sh.n_kv_heads, sh.head_dim, tensor::KvType::F32, 16);
    kc.k_only = sh.k_only;
    kc.budget_bytes = kv::kv_budget_for_tokens(kc, 1024);
    kv::KvCache kv(kc);
    engine::speculative::MtpProposer inc(std::move(f.mtp), kv, f.pool);
    engine::speculative::MtpProposer ref(std::move(fresh), kv, f.pool);
    const auto ids = f.golden["prompts"][1]["ids"].get<std::vector<int32_t>>();
    const auto T = static_cast<int64_t>(ids.size());
    auto ask = [](engine::speculative::MtpProposer& p, int64_t id, const std::vector<int32_t>& toks,
                  int64_t n_prompt, int32_t k) {
        engine::speculative::DraftRequest r;
        r.id = kv::SeqId{id};
        r.tokens = toks;
        r.n_prompt = n_prompt;
        r.k = k;
        engine::speculative::DraftRequest* rp = &r;
        p.propose(std::span<engine::speculative::DraftRequest*>(&rp, 1));
        return r.draft;
    };
    int32_t next = -1;
    std::vector<float> h = f.target_hidden(ids, next);
    inc.observe_hidden(kv::SeqId{1}, 0, ids, h.data());
    std::vector<int32_t> toks = ids;
    toks.push_back(next);
    const std::vector<int32_t> d = ask(inc, 1, toks, T, 3);
    ASSERT_EQ(d.size(), 3u);
    // The verify step: [next, d0, d1, d2] at positions T..T+3; the target keeps d0 and answers x.
    std::vector<int32_t> verified = toks;
    verified.insert(verified.end(), d.begin(), d.end());
    int32_t unused = -1;
    const std::vector<float> hv = f.target_hidden(verified, unused);
    inc.observe_hidden(kv::SeqId{1}, T,
                       std::span<const int32_t>(verified).subspan(static_cast<size_t>(T)),
                       hv.data() + T * c.d_model);
    inc.rollback(kv::SeqId{1}, T + 2);
    const int32_t x = (d[1] + 7) % static_cast<int32_t>(c.vocab_size);
    std::vector<int32_t> now(toks.begin(), toks.end());
    now.push_back(d[0]);
    now.push_back(x);
    const std::vector<int32_t> got = ask(inc, 1, now, T, 3);
    // From scratch: the target's hidden states of positions 0..T+1 in one go.
    const std::vector<int32_t> prefix(now.begin(), now.end() - 1);
    const std::vector<float> hp = f.target_hidden(prefix, unused);
    ref.observe_hidden(kv::SeqId{2}, 0, prefix, hp.data());
    EXPECT_EQ(got, ask(ref, 2, now, T, 3));
    EXPECT_EQ(got.size(), 3u);
    inc.release(kv::SeqId{1});
    ref.release(kv::SeqId{2});
}

// A sequence whose earlier hidden states never came (its prompt came from the prefix cache)
// gets no MTP drafts, and says so in the stats.
TEST(Mtp, NoDraftsWithoutTheTargetsHiddenStates) {
    Fixture f("tiny-glm4-moe-mtp", "tiny-glm4-moe");
    const model::ModelConfig& c = f.target->config;
    kv::KvCacheConfig kc =
        kv::KvCacheConfig::shaped(c.n_layers, c.n_kv_heads, c.head_dim, tensor::KvType::F32, 16);
    kc.budget_bytes = kv::kv_budget_for_tokens(kc, 256);
    kv::KvCache kv(kc);
    const auto ids = f.golden["prompts"][0]["ids"].get<std::vector<int32_t>>();
    int32_t next = -1;
    const std::vector<float> h = f.target_hidden(ids, next);
    engine::speculative::MtpProposer prop(std::move(f.mtp), kv, f.pool);
    // Only the last 4 positions' hidden states arrive.
    const auto n = static_cast<int64_t>(ids.size());
    prop.observe_hidden(kv::SeqId{7}, n - 4, std::span<const int32_t>(ids).subspan(ids.size() - 4),
                        h.data() + (n - 4) * c.d_model);
    std::vector<int32_t> tokens = ids;
    tokens.push_back(next);
    engine::speculative::DraftRequest r;
    r.id = kv::SeqId{7};
    r.tokens = tokens;
    r.n_prompt = n;
    r.k = 3;
    engine::speculative::DraftRequest* rp = &r;
    prop.propose(std::span<engine::speculative::DraftRequest*>(&rp, 1));
    EXPECT_TRUE(r.draft.empty());
    EXPECT_EQ(prop.stats().no_hidden, 1);
    EXPECT_EQ(prop.pages_held(), 0);
}

TEST(Mtp, ModelWithoutNextnLayersIsRefused) {
    util::ThreadPool pool(1);
    model::LoadOptions o;
    const auto m = model::load_model(kGolden + "tiny-deepseek-v3", o, pool);
    EXPECT_EQ(m->config.nextn.n_layers, 0);
    try {
        (void)model::load_mtp_model(*m, o, pool);
        FAIL() << "no error";
    } catch (const util::Error& e) {
        EXPECT_NE(std::string(e.what()).find("no MTP layers"), std::string::npos) << e.what();
    }
}

#include "engine/speculative/proposer_kv.h"

#include "util/log.h"

namespace warden::engine::speculative {

bool reserve_pages(kv::KvCache& kv, kv::PageTable& table, int64_t n_tokens, int64_t keep_free) {
    const int64_t need = kv.pages_for(n_tokens) - static_cast<int64_t>(table.pages.size());
    if (need > 0 && kv.pool().free_pages() - need < keep_free) return false;
    return kv.reserve(table, n_tokens);
}

void trim_pages(kv::KvCache& kv, kv::PageTable& table) {
    const int64_t keep = kv.pages_for(table.n_tokens);
    while (static_cast<int64_t>(table.pages.size()) > keep) {
        (void)kv.pool().release(table.pages.back());
        table.pages.pop_back();
    }
}

bool check_pages(kv::KvCache& kv, kv::SeqId id, kv::PageTable& table, const char* what,
                 int64_t& violations) {
    const auto bad = kv.verify(id, table);
    if (!bad) return true;
    ++violations;
    spdlog::warn("{} KV of request {} failed its check ({}); drafting stops for it", what, id.v,
                 bad->describe());
    table.pages.clear();  // not ours to free any more
    return false;
}

void prepare_sampler(std::unique_ptr<Sampler>& sampler, const SamplingParams* sampling,
                     uint64_t salt) {
    if (!sampling || sampling->temperature <= 0.0f) {
        sampler.reset();
    } else if (!sampler) {
        SamplingParams sp = *sampling;
        sp.seed ^= salt;
        sampler = std::make_unique<Sampler>(sp);
    }
}

}  // namespace warden::engine::speculative

#include "constrain/constraint.h"

#include <algorithm>
#include <limits>
#include <list>
#include <mutex>

namespace warden::constrain {

namespace {

// Compiled grammars kept for reuse (each holds its own mask cache).
constexpr size_t kMaxCompiled = 16;

bool is_stop(int32_t token, std::span<const int32_t> stop_ids) {
    return std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
}

}  // namespace

Grammar choice_grammar(const std::vector<std::string>& choices) {
    if (choices.empty()) throw SpecError("choice", "the list of choices is empty");
    std::vector<Grammar> alts;
    for (const auto& c : choices) {
        if (c.empty()) throw SpecError("choice", "a choice is the empty string");
        alts.push_back(literal(c));
    }
    Grammar g = alternatives(alts);
    g.validate();
    return g;
}

std::shared_ptr<const CompiledGrammar> compile(const Grammar& g,
                                               std::shared_ptr<const Vocabulary> vocab) {
    g.validate();
    struct Entry {
        std::string text;
        std::shared_ptr<const Vocabulary> vocab;
        std::shared_ptr<const CompiledGrammar> compiled;
    };
    static std::mutex mu;
    static std::list<Entry> lru;  // most recent first
    const std::string text = g.to_gbnf();
    {
        std::lock_guard lk(mu);
        for (auto it = lru.begin(); it != lru.end(); ++it)
            if (it->vocab == vocab && it->text == text) {
                lru.splice(lru.begin(), lru, it);
                return lru.front().compiled;
            }
    }
    auto compiled = std::make_shared<const CompiledGrammar>(g, vocab);
    std::lock_guard lk(mu);
    lru.push_front(Entry{text, std::move(vocab), compiled});
    if (lru.size() > kMaxCompiled) lru.pop_back();
    return compiled;
}

Constraint::Constraint(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), state_(grammar_->program().initial()) {}

const std::string& Constraint::piece(int32_t token) const {
    const Vocabulary& v = grammar_->vocab();
    if (at_start_) {
        const auto& sp = v.start_pieces();
        auto it = std::lower_bound(sp.begin(), sp.end(), token,
                                   [](const auto& e, int32_t id) { return e.first < id; });
        if (it != sp.end() && it->first == token) return it->second;
    }
    return v.bytes(token);
}

bool Constraint::allows(int32_t token, std::span<const int32_t> stop_ids) const {
    if (is_stop(token, stop_ids)) return can_stop();
    const Vocabulary& v = grammar_->vocab();
    if (token < 0 || token >= v.size() || is_stop(token, v.stop_ids())) return false;
    // Control tokens have no place in a grammar's text (the mask never has them either).
    if (std::binary_search(v.unusable().begin(), v.unusable().end(), token)) return false;
    const std::string& b = piece(token);
    if (b.empty()) return false;
    MatchState s = state_;
    return grammar_->program().advance(s, b);
}

bool Constraint::apply(std::span<float> logits, std::span<const int32_t> stop_ids) const {
    const auto mask = grammar_->mask(state_);
    const Vocabulary& v = grammar_->vocab();
    const Program& prog = grammar_->program();
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    // Tokens the mask does not decide: stop tokens (allowed when the text is complete) and,
    // for the first token, those whose text differs there. Their logits are kept aside.
    std::vector<std::pair<size_t, float>> keep;
    if (can_stop())
        for (int32_t s : stop_ids)
            if (s >= 0 && static_cast<size_t>(s) < logits.size())
                keep.emplace_back(static_cast<size_t>(s), logits[static_cast<size_t>(s)]);
    const bool start = at_start_ && !v.start_pieces().empty();
    if (start)
        for (const auto& [id, b] : v.start_pieces()) {
            MatchState s = state_;
            if (static_cast<size_t>(id) < logits.size() && !b.empty() && prog.advance(s, b))
                keep.emplace_back(static_cast<size_t>(id), logits[static_cast<size_t>(id)]);
        }
    const size_t n = std::min(logits.size(), static_cast<size_t>(v.size()));
    bool any = !keep.empty();
    for (size_t w = 0; w * 64 < n; ++w) {
        const uint64_t bits = (*mask)[w];
        const size_t end = std::min(n, w * 64 + 64);
        if (bits == 0) {
            std::fill(logits.begin() + static_cast<std::ptrdiff_t>(w * 64),
                      logits.begin() + static_cast<std::ptrdiff_t>(end), kNegInf);
            continue;
        }
        for (size_t i = w * 64; i < end; ++i)
            if (!((bits >> (i & 63)) & 1))
                logits[i] = kNegInf;
            else
                any = true;
    }
    for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
    if (start)  // the mask's verdict on an ordinary piece does not hold for its start form
        for (const auto& [id, b] : v.start_pieces())
            if (static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] = kNegInf;
    for (const auto& [i, l] : keep) logits[i] = l;
    return any;
}

bool Constraint::accept(int32_t token) {
    const Vocabulary& v = grammar_->vocab();
    if (token < 0 || token >= v.size()) return false;
    const std::string& b = piece(token);
    if (b.empty()) return false;
    MatchState s = state_;
    if (!grammar_->program().advance(s, b)) return false;
    state_ = std::move(s);
    at_start_ = false;
    return true;
}

}  // namespace warden::constrain

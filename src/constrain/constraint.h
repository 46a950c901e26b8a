#pragma once
// Structured outputs: the API through which the server (response_format, vLLM's guided_* and
// structured_outputs fields) and tool calling (tool_choice required / named) constrain what a
// sequence may generate. A grammar is compiled once per vocabulary (compile() caches it); each
// sequence gets its own Constraint (n > 1: one per choice), which the engine asks for the
// allowed tokens before sampling and advances with the sampled token.
//
//   auto vocab = std::make_shared<const Vocabulary>(tokenizer);    // once per tokenizer
//   Grammar g = json_schema_grammar(schema);                        // json_schema.h
//   // or: json_object_grammar(), regex_grammar(re) (regex.h), choice_grammar({"yes", "no"}),
//   //     parse_gbnf(text) (gbnf.h), and compositions of them (grammar.h), e.g. a tool call
//   //     wrapped in its template's literal text:
//   //     sequence({literal("<tool_call>\n"), json_schema_grammar(args),
//   literal("\n</tool_call>")}) engine::Request req = ...; req.constraint =
//   std::make_shared<Constraint>(compile(g, vocab));
//
// Every builder throws SpecError (its `keyword` names what was refused) for input it cannot
// enforce exactly; the server turns that into a 400 naming the request field.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "constrain/grammar.h"
#include "constrain/token_mask.h"

namespace warden::constrain {

// Exactly one of the given strings (vLLM's guided_choice). Throws SpecError for an empty list.
Grammar choice_grammar(const std::vector<std::string>& choices);

// The grammar compiled for a vocabulary. Calls with an equal grammar (same GBNF text) and the
// same vocabulary share one CompiledGrammar, and with it the cache of token masks. Thread-safe.
std::shared_ptr<const CompiledGrammar> compile(const Grammar& g,
                                               std::shared_ptr<const Vocabulary> vocab);

// The state of one constrained sequence. Used by one thread at a time (the scheduler's).
class Constraint {
  public:
    explicit Constraint(std::shared_ptr<const CompiledGrammar> grammar);

    // Whether `token` may come next. A token in `stop_ids` (the request's stop tokens) is
    // allowed exactly when the text so far is complete (can_stop()).
    bool allows(int32_t token, std::span<const int32_t> stop_ids) const;
    // Sets every logit of a token that may not come next to -inf. False when no token at all
    // may come next (the sequence must end; it cannot happen for a grammar whose every prefix
    // continues, unless the vocabulary cannot spell the continuation).
    bool apply(std::span<float> logits, std::span<const int32_t> stop_ids) const;
    // Advances by a sampled token (not a stop token). False, with the state unchanged, if the
    // token was not allowed.
    bool accept(int32_t token);

    // The text so far is a complete sentence of the grammar.
    bool can_stop() const { return state_.can_accept(); }
    // ... and nothing may follow it: generation should end here.
    bool must_stop() const { return state_.can_accept() && !state_.can_continue(); }

    const CompiledGrammar& grammar() const { return *grammar_; }

  private:
    const std::string& piece(int32_t token) const;
    std::shared_ptr<const CompiledGrammar> grammar_;
    MatchState state_;
    bool at_start_ = true;  // no token accepted yet (SentencePiece start pieces apply)
};

}  // namespace warden::constrain

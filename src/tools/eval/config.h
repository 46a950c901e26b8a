#pragma once
// `warden eval` configurations: "weights=bf16,kv=bf16" -> the same option structs the other
// commands fill from their flags, so eval runs exactly what serve/run would run.
#include <string>

#include "launch/common.h"
#include "launch/engine_options.h"

namespace warden::tools::eval {

struct EvalConfig {
    std::string text;  // as given
    launch::CommonOptions common;
    launch::EngineOptions engine;
};

// Keys: weights (the runtime weight format; bf16 when not named, so that a configuration that
// names only its KV format compares KV formats alone; `auto` for the checkpoint's own format as
// the other commands load it), kv (the KV cache format), integrity (KV integrity mode). Throws
// util::Error naming the bad key or value and what is accepted.
EvalConfig parse_config(const std::string& spec, const std::string& flag);

}  // namespace warden::tools::eval

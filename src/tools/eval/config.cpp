#include "tools/eval/config.h"

#include <vector>

#include "kernels/attention.h"
#include "tensor/weight_format.h"
#include "util/error.h"

namespace warden::tools::eval {

namespace {

// The values `--kv-dtype` accepts (cli/engine_options.cpp); weights are checked by the same
// parser as `--weights` (tensor::parse_weight_format).
const std::vector<std::string> kKv = {"f32", "bf16", "f16", "fp8_e4m3", "fp8_e5m2", "int8"};
const std::vector<std::string> kIntegrity = {"off", "step", "layer"};

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

bool member(const std::vector<std::string>& v, const std::string& x) {
    for (const auto& y : v)
        if (y == x) return true;
    return false;
}

}  // namespace

EvalConfig parse_config(const std::string& spec, const std::string& flag) {
    EvalConfig c;
    c.text = spec;
    c.common.weights = "bf16";  // not the file's own format: see config.h
    util::check(!spec.empty(), flag + ": empty configuration (e.g. weights=bf16,kv=bf16)");
    size_t i = 0;
    while (i <= spec.size()) {
        const size_t j = std::min(spec.find(',', i), spec.size());
        const std::string kv = spec.substr(i, j - i);
        i = j + 1;
        const size_t eq = kv.find('=');
        util::check(eq != std::string::npos && eq > 0 && eq + 1 < kv.size(),
                    flag + ": '" + kv + "' is not KEY=VALUE (keys: weights, kv, integrity)");
        const std::string key = kv.substr(0, eq), val = kv.substr(eq + 1);
        if (key == "weights") {
            try {
                if (val != "auto")
                    (void)tensor::parse_weight_format(val);  // auto: the file's own (cli::load)
            } catch (const util::Error& e) {
                throw util::Error(flag + ": weights=" + val + ": " + e.what());
            }
            c.common.weights = val;
        } else if (key == "kv") {
            util::check(member(kKv, val),
                        flag + ": kv=" + val + " is not supported (supported: " + join(kKv) + ")");
            util::check(tensor::parse_kv_type(val).has_value(),
                        flag + ": kv=" + val + " is not supported by this build");
            c.engine.kv_dtype = val;
        } else if (key == "integrity") {
            util::check(member(kIntegrity, val),
                        flag + ": integrity=" + val + " (supported: " + join(kIntegrity) + ")");
            c.engine.kv_integrity = val;
        } else {
            throw util::Error(flag + ": unknown key '" + key + "' in '" + spec +
                              "' (keys: weights, kv, integrity)");
        }
    }
    return c;
}

}  // namespace warden::tools::eval

#include "tools/bench/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "util/error.h"

namespace warden::tools::bench {

namespace {

// Short, frequent English words: one token each (with a leading space) in common vocabularies.
constexpr const char* kWords[] = {
    "the",    "of",    "and",    "to",    "in",    "is",    "was",   "for",   "on",    "that",
    "with",   "as",    "at",     "by",    "from",  "it",    "an",    "be",    "this",  "are",
    "or",     "his",   "her",    "which", "but",   "not",   "they",  "have",  "had",   "one",
    "new",    "first", "time",   "year",  "day",   "man",   "world", "life",  "work",  "city",
    "water",  "house", "school", "game",  "book",  "team",  "part",  "music", "state", "people",
    "would",  "there", "their",  "been",  "more",  "when",  "will",  "who",   "all",   "she",
    "he",     "we",    "can",    "after", "some",  "two",   "other", "into",  "its",   "also",
    "only",   "over",  "most",   "many",  "then",  "these", "such",  "used",  "made",  "back",
    "name",   "three", "film",   "group", "place", "well",  "long",  "war",   "high",  "small",
    "large",  "light", "home",   "road",  "river", "end",   "old",   "line",  "land",  "way",
    "around",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

double parse_num(const std::string& s, const std::string& flag) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    util::check(!s.empty() && end == s.c_str() + s.size() && std::isfinite(v) && v > 0,
                flag + ": '" + s + "' is not a positive number");
    return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t i = 0;
    while (true) {
        const size_t j = s.find(sep, i);
        out.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
        if (j == std::string::npos) break;
        i = j + 1;
    }
    return out;
}

const char* kToolsJson = R"([
 {"type":"function","function":{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
 {"type":"function","function":{"name":"search_web","description":"Search the web and return the top results","parameters":{"type":"object","properties":{"query":{"type":"string"},"n":{"type":"integer"}},"required":["query"]}}},
 {"type":"function","function":{"name":"read_file","description":"Read a file from the workspace","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}},
 {"type":"function","function":{"name":"run_python","description":"Run a Python snippet and return stdout","parameters":{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}}}
])";

}  // namespace

LenDist LenDist::parse(const std::string& s, const std::string& flag) {
    LenDist d;
    const auto parts = split(s, ':');
    if (parts.size() == 1) {
        d.kind = Kind::Fixed;
        d.a = d.b = d.max = std::round(parse_num(parts[0], flag));
    } else if (parts[0] == "lognormal") {
        util::check(parts.size() == 3 || parts.size() == 4,
                    flag + ": expected lognormal:MEDIAN:SIGMA[:MAX], got '" + s + "'");
        d.kind = Kind::LogNormal;
        d.a = parse_num(parts[1], flag);
        d.b = parse_num(parts[2], flag);
        d.max = parts.size() == 4 ? parse_num(parts[3], flag) : 8 * d.a;
    } else {
        util::check(parts.size() == 2,
                    flag + ": expected N, LO:HI or lognormal:MEDIAN:SIGMA[:MAX], got '" + s + "'");
        d.kind = Kind::Uniform;
        d.a = std::round(parse_num(parts[0], flag));
        d.b = std::round(parse_num(parts[1], flag));
        util::check(d.a <= d.b, flag + ": LO must be <= HI in '" + s + "'");
        d.max = d.b;
    }
    util::check(d.a >= 1 && d.max >= 1, flag + ": lengths must be at least 1");
    return d;
}

int64_t LenDist::sample(std::mt19937_64& rng) const {
    switch (kind) {
        case Kind::Fixed:
            return static_cast<int64_t>(a);
        case Kind::Uniform:
            return std::uniform_int_distribution<int64_t>(static_cast<int64_t>(a),
                                                          static_cast<int64_t>(b))(rng);
        case Kind::LogNormal: {
            const double v = std::lognormal_distribution<double>(std::log(a), b)(rng);
            return static_cast<int64_t>(std::clamp(std::round(v), 1.0, max));
        }
    }
    return 1;
}

std::string synthetic_text(std::mt19937_64& rng, int64_t n) {
    std::string s;
    std::uniform_int_distribution<size_t> pick(0, kNumWords - 1);
    for (int64_t i = 0; i < n; ++i) {
        if (i) s += ' ';
        s += kWords[pick(rng)];
    }
    return s;
}

std::vector<BenchRequest> make_workload(const WorkloadOptions& o, int64_t n) {
    util::check(o.kind == "fixed" || o.kind == "longtail" || o.kind == "agent",
                "--workload must be fixed, longtail or agent, got '" + o.kind + "'");
    util::check(n >= 1, "--requests must be at least 1");
    std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + 1 + o.variant * 0xD1B54A32D192ED03ull);
    LenDist in = o.input, out = o.output;
    if (o.kind == "longtail") {
        // A long tail around the given medians unless the user already gave a distribution.
        if (in.kind == LenDist::Kind::Fixed)
            in = LenDist{LenDist::Kind::LogNormal, in.a, 0.8, 8 * in.a};
        if (out.kind == LenDist::Kind::Fixed)
            out = LenDist{LenDist::Kind::LogNormal, out.a, 0.8, 8 * out.a};
    }
    std::mt19937_64 prefix_rng(o.seed + 7);
    std::vector<BenchRequest> reqs;
    if (o.kind != "agent") {
        const std::string prefix =
            o.shared_prefix > 0 ? synthetic_text(prefix_rng, o.shared_prefix) : "";
        for (int64_t i = 0; i < n; ++i) {
            BenchRequest r;
            const int64_t len = std::max<int64_t>(1, in.sample(rng) - o.shared_prefix);
            r.prompt =
                prefix.empty() ? synthetic_text(rng, len) : prefix + " " + synthetic_text(rng, len);
            r.input_words = o.shared_prefix + len;
            r.max_tokens = out.sample(rng);
            reqs.push_back(std::move(r));
        }
        return reqs;
    }
    // Agent: sessions of `turns` requests; every request carries the shared system prompt
    // (tools listed in it as JSON, so servers without tool support accept it) and the whole
    // history of its session so far, with synthetic assistant replies of the output length.
    util::check(o.turns >= 1, "--turns must be at least 1");
    const int64_t sys_words = o.shared_prefix > 0 ? o.shared_prefix : 512;
    const std::string system =
        "You are a helpful agent. You can call these tools: " + std::string(kToolsJson) +
        "\nContext: " + synthetic_text(prefix_rng, sys_words);
    const int64_t sessions = (n + o.turns - 1) / o.turns;
    std::vector<nlohmann::json> history(static_cast<size_t>(sessions));
    std::vector<int64_t> words(static_cast<size_t>(sessions), sys_words + 120);
    for (auto& h : history) h = nlohmann::json::array({{{"role", "system"}, {"content", system}}});
    // Interleave sessions: turn t of every session before turn t+1 of any.
    for (int64_t t = 0; t < o.turns && static_cast<int64_t>(reqs.size()) < n; ++t) {
        for (int64_t s = 0; s < sessions && static_cast<int64_t>(reqs.size()) < n; ++s) {
            auto& h = history[static_cast<size_t>(s)];
            if (t > 0) {
                const int64_t reply = out.sample(rng);
                h.push_back({{"role", "assistant"}, {"content", synthetic_text(rng, reply)}});
                words[static_cast<size_t>(s)] += reply;
            }
            const int64_t user = in.sample(rng);
            h.push_back({{"role", "user"}, {"content", synthetic_text(rng, user)}});
            words[static_cast<size_t>(s)] += user;
            BenchRequest r;
            r.chat = true;
            r.messages = h;
            r.input_words = words[static_cast<size_t>(s)];
            r.max_tokens = out.sample(rng);
            reqs.push_back(std::move(r));
        }
    }
    return reqs;
}

}  // namespace warden::tools::bench

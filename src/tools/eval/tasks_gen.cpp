// Generation tasks: greedy outputs of base and test on the same prompts, each scored by a
// deterministic check (a planted fact found, JSON parses, brackets balance, the right tool
// named, text copied exactly, distinct n-grams late in a long generation).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "tools/eval/tasks.h"
#include "util/error.h"

namespace warden::tools::eval {

namespace {

std::vector<std::string> limited(std::vector<std::string> v, int64_t limit) {
    if (limit > 0 && static_cast<int64_t>(v.size()) > limit) v.resize(static_cast<size_t>(limit));
    return v;
}

// Greedy output text of both engines for `prompt`.
std::pair<std::string, std::string> both(TaskContext& ctx, const std::string& prompt, int64_t n) {
    const auto p = ctx.base.encode(prompt);
    return {ctx.base.decode(ctx.base.greedy(p, n)), ctx.test.decode(ctx.test.greedy(p, n))};
}

void note_diff(TaskResult& r, const std::string& item, const std::string& b, const std::string& t) {
    if (b != t && r.notes.size() < 4)
        r.notes.push_back("differs on " + item.substr(0, 40) + ": base=" +
                          nlohmann::json(b.substr(0, 80))
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                          " test=" +
                          nlohmann::json(t.substr(0, 80))
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

double distinct_ngram_ratio(const std::vector<int32_t>& toks, size_t n) {
    if (toks.size() < n) return 1.0;
    std::set<std::vector<int32_t>> seen;
    const size_t total = toks.size() - n + 1;
    for (size_t i = 0; i < total; ++i)
        seen.insert(std::vector<int32_t>(toks.begin() + i, toks.begin() + i + n));
    return static_cast<double>(seen.size()) / static_cast<double>(total);
}

bool contains_valid_json(const std::string& s) {
    // The first '{' or '[' to its matching bracket (outside strings) must parse.
    const size_t start = s.find_first_of("{[");
    if (start == std::string::npos) return false;
    int depth = 0;
    bool in_str = false, esc = false;
    for (size_t i = start; i < s.size(); ++i) {
        const char c = s[i];
        if (in_str) {
            if (esc)
                esc = false;
            else if (c == '\\')
                esc = true;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"')
            in_str = true;
        else if (c == '{' || c == '[')
            ++depth;
        else if (c == '}' || c == ']') {
            if (--depth == 0)
                return !nlohmann::json::parse(s.substr(start, i - start + 1), nullptr, false)
                            .is_discarded();
        }
    }
    return false;
}

bool balanced_code(const std::string& s) {
    // Brackets balance and quotes close, line by line for quotes (a proxy for "still code").
    std::vector<char> st;
    char quote = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (quote) {
            if (c == '\\')
                ++i;
            else if (c == quote || c == '\n')
                quote = c == quote ? 0 : quote;
            continue;
        }
        if (c == '"' || c == '\'')
            quote = c;
        else if (c == '(' || c == '[' || c == '{')
            st.push_back(c);
        else if (c == ')' || c == ']' || c == '}') {
            const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
            if (st.empty() || st.back() != want) return false;
            st.pop_back();
        }
    }
    return st.empty() && quote == 0;
}

TaskResult task_retrieval(TaskContext& ctx) {
    // A fact "The access code for <name> is <5 digits>." planted at a relative depth of a
    // haystack of shipped text; the prompt ends asking for it. Score: the code appears in the
    // first 12 generated tokens.
    const std::string text = read_text(ctx.data_dir + "/text.txt");
    const auto hay = ctx.base.encode(text, false);
    const std::vector<int64_t> lengths = {256, 512, 1024};
    const std::vector<double> depths = {0.1, 0.5, 0.9};
    const std::vector<std::string> names = {"Orion",  "Maple",  "Zephyr", "Cobalt", "Juniper",
                                            "Falcon", "Quartz", "Ember",  "Tundra"};
    std::mt19937_64 rng(42);
    Metric found{"fact retrieved", true, {}, {}};
    TaskResult r{"retrieval", {}, {}};
    int64_t item = 0;
    for (const int64_t len : lengths) {
        for (const double d : depths) {
            if (ctx.limit > 0 && item >= ctx.limit) break;
            const std::string name = names[static_cast<size_t>(item) % names.size()];
            const std::string code = std::to_string(10000 + rng() % 90000);
            const std::string fact = " The access code for " + name + " is " + code + ". ";
            const int64_t off = static_cast<int64_t>(item * 97) %
                                std::max<int64_t>(1, static_cast<int64_t>(hay.size()) - len);
            const std::vector<int32_t> part(
                hay.begin() + off,
                hay.begin() + off + std::min<int64_t>(len, static_cast<int64_t>(hay.size())));
            const size_t cut = static_cast<size_t>(d * static_cast<double>(part.size()));
            const std::string pre =
                ctx.base.decode(std::vector<int32_t>(part.begin(), part.begin() + cut));
            const std::string post =
                ctx.base.decode(std::vector<int32_t>(part.begin() + cut, part.end()));
            const std::string prompt = "Read the document and answer.\n\n" + pre + fact + post +
                                       "\n\nQuestion: What is the access code for " + name +
                                       "?\nAnswer: The access code for " + name + " is";
            auto [b, t] = both(ctx, prompt, 12);
            found.base.push_back(b.find(code) != std::string::npos ? 1.0 : 0.0);
            found.test.push_back(t.find(code) != std::string::npos ? 1.0 : 0.0);
            note_diff(r, "len " + std::to_string(len) + " depth " + std::to_string(d).substr(0, 3),
                      b, t);
            ++item;
        }
    }
    r.metrics.push_back(found);
    r.notes.insert(r.notes.begin(), "haystacks of 256/512/1024 tokens x depths 0.1/0.5/0.9");
    return r;
}

TaskResult task_json(TaskContext& ctx) {
    TaskResult r{"json", {}, {}};
    Metric valid{"valid JSON", true, {}, {}};
    for (const auto& p :
         limited(read_jsonl_field(ctx.data_dir + "/json.jsonl", "prompt"), ctx.limit)) {
        auto [b, t] = both(ctx, p, 48);
        // The prompts end inside the JSON value: score the prompt's opening plus the output.
        const std::string open = p.substr(std::min(
            p.size(), p.find_last_of("{[") == std::string::npos ? p.size() : p.find_last_of("{[")));
        valid.base.push_back(contains_valid_json(open + b) ? 1.0 : 0.0);
        valid.test.push_back(contains_valid_json(open + t) ? 1.0 : 0.0);
        note_diff(r, p, b, t);
    }
    r.metrics.push_back(valid);
    return r;
}

TaskResult task_code(TaskContext& ctx) {
    TaskResult r{"code", {}, {}};
    Metric ok{"balanced code", true, {}, {}};
    for (const auto& p :
         limited(read_jsonl_field(ctx.data_dir + "/code.jsonl", "prompt"), ctx.limit)) {
        auto [b, t] = both(ctx, p, 48);
        // Cut at the last complete line so a truncated final line does not count against it.
        auto cut = [](const std::string& s) {
            const size_t k = s.rfind('\n');
            return k == std::string::npos ? s : s.substr(0, k);
        };
        const size_t body = p.rfind("```");
        const std::string head = body == std::string::npos ? "" : p.substr(body + 3);
        ok.base.push_back(balanced_code(head + cut(b)) ? 1.0 : 0.0);
        ok.test.push_back(balanced_code(head + cut(t)) ? 1.0 : 0.0);
        note_diff(r, p, b, t);
    }
    r.metrics.push_back(ok);
    return r;
}

TaskResult task_tools(TaskContext& ctx) {
    TaskResult r{"tools", {}, {}};
    Metric right{"right tool", true, {}, {}};
    const auto prompts =
        limited(read_jsonl_field(ctx.data_dir + "/tools.jsonl", "prompt"), ctx.limit);
    const auto expect = read_jsonl_field(ctx.data_dir + "/tools.jsonl", "expect");
    for (size_t i = 0; i < prompts.size(); ++i) {
        auto [b, t] = both(ctx, prompts[i], 12);
        auto first_tool = [](const std::string& s) {
            const std::vector<std::string> tools = {"get_weather", "search_web", "read_file",
                                                    "run_python", "send_email"};
            size_t best = std::string::npos;
            std::string name;
            for (const auto& tn : tools) {
                const size_t k = s.find(tn);
                if (k < best) best = k, name = tn;
            }
            return name;
        };
        right.base.push_back(first_tool(b) == expect[i] ? 1.0 : 0.0);
        right.test.push_back(first_tool(t) == expect[i] ? 1.0 : 0.0);
        note_diff(r,
                  prompts[i].substr(prompts[i].rfind("User:") == std::string::npos
                                        ? 0
                                        : prompts[i].rfind("User:")),
                  b, t);
    }
    r.metrics.push_back(right);
    return r;
}

TaskResult task_copy(TaskContext& ctx) {
    TaskResult r{"copy", {}, {}};
    Metric exact{"exact copy", true, {}, {}};
    for (const auto& s :
         limited(read_jsonl_field(ctx.data_dir + "/copy.jsonl", "text"), ctx.limit)) {
        const std::string prompt =
            "Copy the line exactly.\nLine: The meeting is on Monday, 3 March 2025 at 10:30.\nCopy: "
            "The meeting is on "
            "Monday, 3 March 2025 at 10:30.\nLine: " +
            s + "\nCopy:";
        const int64_t n = static_cast<int64_t>(ctx.base.encode(s, false).size()) + 4;
        auto [b, t] = both(ctx, prompt, n);
        auto score = [&s](std::string out) {
            while (!out.empty() && out.front() == ' ') out.erase(0, 1);
            return out.rfind(s, 0) == 0 ? 1.0 : 0.0;
        };
        exact.base.push_back(score(b));
        exact.test.push_back(score(t));
        note_diff(r, s, b, t);
    }
    r.metrics.push_back(exact);
    return r;
}

TaskResult task_drift(TaskContext& ctx) {
    TaskResult r{"drift", {}, {}};
    Metric d2{"distinct 4-grams, 2nd half", true, {}, {}};
    Metric agree{"tokens equal to base", true, {}, {}};
    for (const auto& p :
         limited(read_jsonl_field(ctx.data_dir + "/drift.jsonl", "prompt"), ctx.limit)) {
        const auto ids = ctx.base.encode(p);
        const auto b = ctx.base.greedy(ids, 192);
        const auto t = ctx.test.greedy(ids, 192);
        auto second = [](const std::vector<int32_t>& v) {
            return std::vector<int32_t>(v.begin() + static_cast<long>(v.size() / 2), v.end());
        };
        d2.base.push_back(distinct_ngram_ratio(second(b), 4));
        d2.test.push_back(distinct_ngram_ratio(second(t), 4));
        size_t same = 0;
        while (same < std::min(b.size(), t.size()) && b[same] == t[same]) ++same;
        agree.base.push_back(1.0);
        agree.test.push_back(b.empty() ? 1.0
                                       : static_cast<double>(same) / static_cast<double>(b.size()));
    }
    r.metrics.push_back(d2);
    r.metrics.push_back(agree);
    r.notes.push_back(
        "192 greedy tokens per prompt; 'tokens equal to base' = length of the common prefix / base "
        "length");
    return r;
}

TaskResult task_latency(TaskContext& ctx) {
    // Wall time of prefill (TTFT) and decode steps, one sequence at a time; nondeterministic,
    // so opt-in. Concurrency effects are measured by `warden bench` against a server.
    TaskResult r{"latency", {}, {}};
    Metric ttft{"prefill ms (256 tokens)", false, {}, {}}, tpot{"decode ms/token", false, {}, {}},
        cv{"decode ms coefficient of variation", false, {}, {}};
    const auto text = ctx.base.encode(read_text(ctx.data_dir + "/text.txt"), true);
    const int64_t reps = ctx.limit > 0 ? ctx.limit : 4;
    for (int64_t i = 0; i < reps; ++i) {
        const std::vector<int32_t> p(text.begin(),
                                     text.begin() + std::min<size_t>(256, text.size()));
        for (int side = 0; side < 2; ++side) {
            std::vector<double> ms;
            (side ? ctx.test : ctx.base).greedy(p, 33, &ms);
            double s = 0, s2 = 0;
            for (size_t k = 1; k < ms.size(); ++k) s += ms[k], s2 += ms[k] * ms[k];
            const double n = static_cast<double>(ms.size() - 1), m = s / n;
            auto& a = side ? ttft.test : ttft.base;
            auto& b = side ? tpot.test : tpot.base;
            auto& c = side ? cv.test : cv.base;
            a.push_back(ms[0]);
            b.push_back(m);
            c.push_back(std::sqrt(std::max(0.0, s2 / n - m * m)) / m);
        }
    }
    r.metrics = {ttft, tpot, cv};
    return r;
}

const std::vector<std::string>& task_names() {
    static const std::vector<std::string> v = {"kl",    "retrieval", "json",  "code",
                                               "tools", "copy",      "drift", "latency"};
    return v;
}

const std::vector<std::string>& default_tasks() {
    static const std::vector<std::string> v = {"kl",    "retrieval", "json", "code",
                                               "tools", "copy",      "drift"};
    return v;
}

TaskResult run_task(const std::string& name, TaskContext& ctx) {
    if (name == "kl") return task_kl(ctx);
    if (name == "retrieval") return task_retrieval(ctx);
    if (name == "json") return task_json(ctx);
    if (name == "code") return task_code(ctx);
    if (name == "tools") return task_tools(ctx);
    if (name == "copy") return task_copy(ctx);
    if (name == "drift") return task_drift(ctx);
    if (name == "latency") return task_latency(ctx);
    check_task_name(name);
    throw util::Error("eval: task '" + name + "' has no runner");
}

void check_task_name(const std::string& name) {
    for (const auto& t : task_names())
        if (t == name) return;
    std::string known;
    for (const auto& t : task_names()) known += (known.empty() ? "" : ", ") + t;
    throw util::Error("eval: unknown task '" + name + "' (tasks: " + known + ")");
}

}  // namespace warden::tools::eval

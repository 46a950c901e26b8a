// Teacher-forced tasks: KL divergence, top-1 agreement and per-token NLL over shipped text.
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "tools/eval/tasks.h"
#include "util/error.h"

namespace warden::tools::eval {

std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    util::check(static_cast<bool>(f), "eval: cannot open task data '" + path + "'");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<std::string> read_jsonl_field(const std::string& path, const std::string& field) {
    std::istringstream in(read_text(path));
    std::vector<std::string> out;
    std::string line;
    int64_t lineno = 0;
    while (std::getline(in, line)) {
        ++lineno;
        if (line.empty()) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        util::check(!j.is_discarded() && j.is_object() && j.contains(field) && j[field].is_string(),
                    "eval: " + path + ":" + std::to_string(lineno) +
                        ": expected a JSON object with string '" + field + "'");
        out.push_back(j[field].get<std::string>());
    }
    util::check(!out.empty(), "eval: '" + path + "' has no items");
    return out;
}

TaskResult task_kl(TaskContext& ctx) {
    // Non-overlapping windows of 256 tokens (BOS + 255 of text) over data/eval/text.txt.
    const std::string text = read_text(ctx.data_dir + "/text.txt");
    const auto ids = ctx.base.encode(text, false);
    const size_t win = 255;
    int64_t n_windows = static_cast<int64_t>(ids.size() / win);
    util::check(n_windows >= 1, "eval: text.txt is too short");
    n_windows = std::min<int64_t>(n_windows, ctx.limit > 0 ? ctx.limit : 8);
    const int32_t bos = ctx.base.tokenizer().bos_id();
    Metric nll{"nll/token", false, {}, {}}, kl{"kl(base||test)/token", false, {}, {}},
        top1{"top1 agreement", true, {}, {}};
    const int64_t V = ctx.base.vocab();
    util::check(ctx.test.vocab() == V, "eval: base and test have different vocabularies");
    for (int64_t w = 0; w < n_windows; ++w) {
        std::vector<int32_t> toks;
        if (bos >= 0) toks.push_back(bos);
        toks.insert(toks.end(), ids.begin() + w * static_cast<int64_t>(win),
                    ids.begin() + (w + 1) * static_cast<int64_t>(win));
        const auto lb = ctx.base.logits_all(toks);
        const auto lt = ctx.test.logits_all(toks);
        double s_nll_b = 0, s_nll_t = 0, s_kl = 0, s_agree = 0;
        const size_t n = toks.size() - 1;  // positions with a next token
        for (size_t p = 0; p < n; ++p) {
            const float* b = lb.data() + p * static_cast<size_t>(V);
            const float* t = lt.data() + p * static_cast<size_t>(V);
            double mb = b[0], mt = t[0];
            int64_t ab = 0, at = 0;
            for (int64_t i = 1; i < V; ++i) {
                if (b[i] > mb) mb = b[i], ab = i;
                if (t[i] > mt) mt = t[i], at = i;
            }
            double zb = 0, zt = 0;
            for (int64_t i = 0; i < V; ++i) zb += std::exp(b[i] - mb), zt += std::exp(t[i] - mt);
            const double lzb = mb + std::log(zb), lzt = mt + std::log(zt);
            double k = 0;
            for (int64_t i = 0; i < V; ++i) {
                const double lpb = b[i] - lzb, lpt = t[i] - lzt;
                k += std::exp(lpb) * (lpb - lpt);
            }
            const int32_t next = toks[p + 1];
            s_nll_b += -(b[next] - lzb);
            s_nll_t += -(t[next] - lzt);
            s_kl += std::max(0.0, k);
            s_agree += ab == at ? 1.0 : 0.0;
        }
        const double dn = static_cast<double>(n);
        nll.base.push_back(s_nll_b / dn);
        nll.test.push_back(s_nll_t / dn);
        kl.base.push_back(0.0);
        kl.test.push_back(s_kl / dn);
        top1.base.push_back(1.0);
        top1.test.push_back(s_agree / dn);
    }
    TaskResult r{"kl", {nll, kl, top1}, {}};
    r.notes.push_back(
        std::to_string(n_windows) +
        " windows of 256 tokens of data/eval/text.txt; kl and top1 compare "
        "test against base at every position (base's own scores are 0 and 1 by definition)");
    return r;
}

}  // namespace warden::tools::eval

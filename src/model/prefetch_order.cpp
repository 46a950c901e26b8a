#include "model/prefetch_order.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>

namespace warden::model {

std::vector<util::FileRange> safetensors_prefetch_order(const formats::SafetensorsModel& st,
                                                        bool tied) {
    const std::vector<std::string> paths = st.file_paths();
    struct Piece {
        int cls;
        size_t file;
        util::FileRange range;
    };
    std::vector<Piece> pieces;
    for (const formats::SafetensorsTensor& t : st.tensors()) {
        if (t.n_bytes == 0) continue;
        const bool in_place_codes =
            t.name.ends_with(".weight_packed") || t.dtype.starts_with("F8_");
        const bool lookup_table = !tied && t.name == "model.embed_tokens.weight";
        util::FileRange r = st.range_of(t);
        const auto file =
            static_cast<size_t>(std::find(paths.begin(), paths.end(), r.path) - paths.begin());
        pieces.push_back({lookup_table ? 2 : in_place_codes ? 1 : 0, file, std::move(r)});
    }
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
        return std::tie(a.cls, a.file, a.range.offset) < std::tie(b.cls, b.file, b.range.offset);
    });
    std::vector<util::FileRange> out;
    int last_cls = -1;
    for (Piece& p : pieces) {
        if (!out.empty() && p.cls == last_cls && out.back().path == p.range.path &&
            p.range.offset >= out.back().offset &&
            p.range.offset <= out.back().offset + out.back().length + util::kPrefetchChunk) {
            out.back().length =
                std::max(out.back().length, p.range.offset + p.range.length - out.back().offset);
            continue;
        }
        out.push_back(std::move(p.range));
        last_cls = p.cls;
    }
    return out;
}

}  // namespace warden::model

// The order a safetensors checkpoint is prefetched in: what the loader reads while loading first,
// then the codes it reads in place, then an embedding table only looked up; file order within
// each, neighbours merged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/safetensors_file.h"
#include "formats/safetensors_writer.h"
#include "model/prefetch_order.h"

using namespace warden;
namespace fs = std::filesystem;

namespace {

struct TempDir {
    fs::path path =
        fs::temp_directory_path() / ("warden_prefetch_order_" + std::to_string(::getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

constexpr uint64_t kMiB = 1 << 20;

// The plan as "offset+length" strings (one file).
std::vector<std::string> plan(const formats::SafetensorsModel& st, bool tied) {
    std::vector<std::string> out;
    for (const auto& r : model::safetensors_prefetch_order(st, tied))
        out.push_back(std::to_string(r.offset) + "+" + std::to_string(r.length));
    return out;
}

std::string at(const formats::SafetensorsModel& st, const std::string& name, uint64_t length) {
    return std::to_string(st.range_of(*st.find(name)).offset) + "+" + std::to_string(length);
}

}  // namespace

TEST(PrefetchOrder, ReadsScalesAndTheHeadBeforeInPlaceCodesAndTheLookupTableLast) {
    TempDir d;
    // 1 MiB each (far more than the merge gap), back to back by decreasing element size as the
    // writer puts them: packed codes first, then head, table and scales, the FP8 codes last.
    formats::SafetensorsWriter w;
    w.add_tensor("model.layers.0.mlp.down_proj.weight_packed", "I32", {kMiB / 4},
                 std::vector<uint8_t>(kMiB, 1));  // read in place
    w.add_tensor("model.layers.0.self_attn.q_proj.weight", "F8_E4M3", {kMiB},
                 std::vector<uint8_t>(kMiB, 1));  // FP8 codes: in place too
    w.add_tensor("lm_head.weight", "BF16", {kMiB / 2}, std::vector<uint8_t>(kMiB, 1));
    w.add_tensor("model.embed_tokens.weight", "BF16", {kMiB / 2}, std::vector<uint8_t>(kMiB, 1));
    w.add_tensor("model.layers.0.mlp.down_proj.weight_scale", "BF16", {kMiB / 2},
                 std::vector<uint8_t>(kMiB, 1));
    w.write((d.path / "model.safetensors").string());
    const formats::SafetensorsModel st = formats::SafetensorsModel::open_dir(d.path.string());

    // Untied: the head and the scales, then both codes, the table last.
    EXPECT_EQ(plan(st, false),
              (std::vector<std::string>{at(st, "lm_head.weight", kMiB),
                                        at(st, "model.layers.0.mlp.down_proj.weight_scale", kMiB),
                                        at(st, "model.layers.0.mlp.down_proj.weight_packed", kMiB),
                                        at(st, "model.layers.0.self_attn.q_proj.weight", kMiB),
                                        at(st, "model.embed_tokens.weight", kMiB)}));
    // Tied: the table is the head, read at load like it: head, table and scales are one range.
    EXPECT_EQ(plan(st, true),
              (std::vector<std::string>{at(st, "lm_head.weight", 3 * kMiB),
                                        at(st, "model.layers.0.mlp.down_proj.weight_packed", kMiB),
                                        at(st, "model.layers.0.self_attn.q_proj.weight", kMiB)}));
}

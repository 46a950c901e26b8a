// Deferred copies (model/deferred_layouts.h): GGUF Q8_0 / Q4_0 / Q4_1 blocks are read in place at
// start-up and as int8-g32 / int4-g32 / int4-g32-asym panels once a background thread has built
// them.
//  - the copies are exactly the synchronous import's panels (--no-mmap), every matrix moves to
//    them, and the process holds no second copy (the in-place bytes are the file's);
//  - logits are the synchronous import's, bit for bit, whatever the thread has done so far;
//  - once a copy is published, every source range it replaced leaves the process's memory;
//  - a stop leaves the remaining matrices on their original layout; a model destroyed while its
//    copies are being built stops the thread first (AddressSanitizer checks the rest).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "convert/quantize_model.h"
#include "model/deferred_layouts.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/transformer.h"
#include "smaps.h"
#include "tensor/weight_format.h"
#include "test_paths.h"
#include "util/mapped_file.h"
#include "util/thread_pool.h"

namespace warden::model {
namespace {

// The tiny model written by `warden quantize` in `format` (int8-g32: GGUF Q8_0, int4-g32: Q4_0,
// int4-g32-asym: Q4_1), head included.
std::string block_file(util::ThreadPool& pool, const std::string& format = "int8-g32") {
    const std::string out = (std::filesystem::temp_directory_path() /
                             ("warden_deferred_" + std::to_string(::getpid()) + ".gguf"))
                                .string();
    const auto f = tensor::parse_weight_format(format);
    convert::quantize_gguf(test::golden_model("tiny-llama.gguf"), out, f,
                           convert::HeadOptions::as(f), pool);
    return out;
}

std::vector<const Matrix*> matmul_matrices(const Model& m) {
    std::vector<const Matrix*> v{&m.weights.output};
    for (const LayerWeights& l : m.weights.layers)
        for (const Matrix* x : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            v.push_back(x);
    return v;
}

std::vector<float> logits(const Model& m, util::ThreadPool& pool) {
    Transformer tf(m, pool);
    ContiguousKvCache cache(m.config, 8, tensor::KvType::F32);
    const std::vector<int32_t> toks = {1, 15, 27, 3};
    std::vector<float> out(static_cast<size_t>(m.config.vocab_size) * toks.size());
    tf.forward(toks.data(), static_cast<int>(toks.size()), cache, out.data(), true);
    return out;
}

class DeferredBlocks : public ::testing::TestWithParam<const char*> {};

TEST_P(DeferredBlocks, BlocksMoveToTheSynchronousImportsPanels) {
    util::ThreadPool pool(2);
    const std::string format = GetParam();
    const tensor::WeightFormat f = tensor::parse_weight_format(format);
    const std::string path = block_file(pool, format);
    LoadOptions sync_opts;
    sync_opts.map_weights = false;  // --no-mmap: panels built while loading
    const auto sync = load_model(path, sync_opts, pool);
    const auto deferred = load_model(path, LoadOptions{}, pool);
    std::filesystem::remove(path);  // the mapping keeps the bytes
    ASSERT_EQ(deferred->weights_format, format);
    EXPECT_EQ(sync->deferred_layouts, nullptr);
    ASSERT_NE(deferred->deferred_layouts, nullptr);
    // Whatever the thread has published so far, the same logits as the panels.
    const std::vector<float> want = logits(*sync, pool);
    EXPECT_EQ(logits(*deferred, pool), want);

    deferred->wait_for_deferred_layouts();
    const DeferredLayouts& d = *deferred->deferred_layouts;
    EXPECT_EQ(d.published(), d.total());
    const auto a = matmul_matrices(*deferred), b = matmul_matrices(*sync);
    int64_t bytes = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        SCOPED_TRACE("matrix " + std::to_string(i));
        EXPECT_TRUE(a[i]->reads_deferred_copy());
        EXPECT_FALSE(a[i]->is_mapped());
        ASSERT_EQ(a[i]->view().type, f.type);
        ASSERT_EQ(a[i]->view().group, 32);
        ASSERT_EQ(a[i]->view().asym, f.asym);
        ASSERT_EQ(a[i]->bytes(), b[i]->bytes());
        ASSERT_TRUE(std::ranges::equal(a[i]->packed(), b[i]->packed()));
        bytes += b[i]->bytes();
    }
    // Every block matrix was deferred once: the matmul matrices, and the embedding table unless
    // the head is an alias of it (its rows read the same either way).
    const bool tied = deferred->weights.output.shares_weights_with(deferred->weights.token_embd);
    if (!tied) bytes += sync->weights.token_embd.bytes();
    EXPECT_EQ(d.total(), static_cast<int64_t>(a.size()) + (tied ? 0 : 1));
    EXPECT_EQ(d.copy_bytes(), bytes);
    EXPECT_EQ(deferred->weight_memory.deferred_copies, d.copy_bytes());
    EXPECT_EQ(logits(*deferred, pool), want);
    // The embedding table's rows read the same from the panels as from the synchronous import.
    const int64_t cols = deferred->weights.token_embd.cols();
    std::vector<float> ra(static_cast<size_t>(cols)), rb(static_cast<size_t>(cols));
    for (int64_t r : {int64_t{0}, int64_t{7}, deferred->weights.token_embd.rows() - 1}) {
        deferred->weights.token_embd.row_f32(r, ra.data());
        sync->weights.token_embd.row_f32(r, rb.data());
        ASSERT_EQ(ra, rb) << "row " << r;
    }
}

INSTANTIATE_TEST_SUITE_P(Formats, DeferredBlocks,
                         ::testing::Values("int8-g32", "int4-g32", "int4-g32-asym"),
                         [](const auto& p) {
                             std::string s = p.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

// A compressed-tensors int4 checkpoint (packed by the compressed-tensors package itself, bf16
// scales) reads its codes and scales in place, then the same panels as the synchronous import.
TEST(DeferredLayouts, CompressedTensorsCodesMoveToTheSynchronousImportsPanels) {
    util::ThreadPool pool(2);
    const std::string path = test::golden_model("tiny-llama-ct-int4");
    LoadOptions sync_opts;
    sync_opts.map_weights = false;
    const auto sync = load_model(path, sync_opts, pool);
    const auto deferred = load_model(path, LoadOptions{}, pool);
    ASSERT_EQ(deferred->weights_format, "int4-g32-bf16s");
    EXPECT_EQ(sync->deferred_layouts, nullptr);
    ASSERT_NE(deferred->deferred_layouts, nullptr);
    const std::vector<float> want = logits(*sync, pool);
    EXPECT_EQ(logits(*deferred, pool), want);
    deferred->wait_for_deferred_layouts();
    const auto a = matmul_matrices(*deferred), b = matmul_matrices(*sync);
    int64_t layers = 0;
    for (size_t i = 1; i < a.size(); ++i) {  // [0]: the head, int8 from the bf16 checkpoint
        SCOPED_TRACE("matrix " + std::to_string(i));
        EXPECT_TRUE(a[i]->reads_deferred_copy());
        EXPECT_FALSE(a[i]->view().row_major);
        ASSERT_TRUE(std::ranges::equal(a[i]->packed(), b[i]->packed()));
        layers += b[i]->bytes();
    }
    EXPECT_EQ(deferred->deferred_layouts->total(), static_cast<int64_t>(a.size()) - 1);
    EXPECT_EQ(deferred->weight_memory.deferred_copies, layers);
    // The copies are the only panels: nothing else took arena bytes for the in-place matrices. The
    // bf16 embedding table (only looked up) is read in place too, where --no-mmap copies it.
    EXPECT_TRUE(deferred->weights.token_embd.is_mapped());
    EXPECT_FALSE(sync->weights.token_embd.is_mapped());
    EXPECT_EQ(deferred->weight_memory.arena + sync->weights.token_embd.bytes(),
              sync->weight_memory.arena);
    EXPECT_EQ(logits(*deferred, pool), want);
}

// FP8 block-scaled checkpoints (MoE and MLA, 32x32 blocks) read their codes in place, then the
// same panels as the synchronous import, and take arena bytes for those panels only: the loads
// differ by the embedding table, which --no-mmap copies and a default load reads in place.
TEST(DeferredLayouts, Fp8CodesMoveToPanelsWithoutASecondArenaCopy) {
    util::ThreadPool pool(2);
    for (const char* name : {"tiny-glm4-moe-fp8", "tiny-deepseek-v3-fp8"}) {
        SCOPED_TRACE(name);
        const std::string path = test::golden_model(name);
        LoadOptions sync_opts;
        sync_opts.map_weights = false;
        const auto sync = load_model(path, sync_opts, pool);
        const auto deferred = load_model(path, LoadOptions{}, pool);
        ASSERT_NE(deferred->deferred_layouts, nullptr);
        EXPECT_EQ(sync->deferred_layouts, nullptr);
        deferred->wait_for_deferred_layouts();
        const DeferredLayouts& d = *deferred->deferred_layouts;
        EXPECT_EQ(d.published(), d.total());
        EXPECT_EQ(deferred->weight_memory.deferred_copies, d.copy_bytes());
        const Matrix& embd = deferred->weights.token_embd;
        const int64_t lookup_copy =
            embd.is_mapped() && !sync->weights.token_embd.is_mapped() ? embd.bytes() : 0;
        EXPECT_EQ(sync->weight_memory.arena - deferred->weight_memory.arena, lookup_copy);
    }
}

TEST(DeferredLayouts, AModelDestroyedWhileBuildingStopsTheThreadFirst) {
    util::ThreadPool pool(2);
    const std::string path = block_file(pool, "int4-g32");
    for (int i = 0; i < 3; ++i) {
        auto m = load_model(path, LoadOptions{}, pool);
        ASSERT_NE(m->deferred_layouts, nullptr);
        m.reset();
    }
    std::filesystem::remove(path);
}

TEST(DeferredLayouts, AStopLeavesTheRestOnTheirOriginalLayout) {
    constexpr int kJobs = 4;
    std::atomic<bool> started{false}, release{false};
    std::atomic<int> built{0};
    std::vector<std::shared_ptr<DeferredCopy>> copies;
    std::vector<DeferredLayouts::Job> jobs;
    for (int i = 0; i < kJobs; ++i) {
        auto c = std::make_shared<DeferredCopy>();
        c->matrix = Matrix::owned(tensor::WeightType::F32, 1, 8);
        copies.push_back(c);
        DeferredLayouts::Job j;
        j.copy = c;
        j.build = [&, i](Matrix& m) {
            if (i == 0) {
                started.store(true);
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
                while (!release.load() && std::chrono::steady_clock::now() < until)
                    std::this_thread::yield();
            }
            const std::vector<float> row(8, static_cast<float>(i + 1));
            m.pack_row(0, row.data());
            built.fetch_add(1);
        };
        jobs.push_back(std::move(j));
    }
    DeferredLayouts d(std::move(jobs), nullptr);
    // Bounded: a thread that never builds fails here instead of hanging the suite.
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!started.load() && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
    ASSERT_TRUE(started.load()) << "the first copy was never built";
    d.request_stop();
    release.store(true);
    d.wait();
    EXPECT_EQ(built.load(), 1);
    EXPECT_EQ(d.published(), 1);
    EXPECT_TRUE(copies[0]->published.load());
    std::vector<float> row(8);
    copies[0]->matrix.row_f32(0, row.data());
    EXPECT_EQ(row[0], 1.0f);
    for (int i = 1; i < kJobs; ++i) EXPECT_FALSE(copies[i]->published.load()) << i;
}

// Resident kB of the mapping that holds p (/proc/self/smaps), -1 where none does.
int64_t mapping_rss_kb(const void* p) {
    const auto rss = test::smaps_field(p, "Rss");
    return rss ? std::stoll(*rss) : -1;
}

TEST(DeferredLayouts, EverySourceRangeIsReleasedOnceItsCopyIsPublished) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("warden_deferred_src_" + std::to_string(::getpid())))
                                 .string();
    constexpr size_t kBytes = 8 << 20, kPage = 4096;
    {
        std::ofstream f(path, std::ios::binary);
        const std::string block(kBytes, 'w');
        f.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
    const util::MappedFile file(path);
    std::filesystem::remove(path);  // the mapping keeps the pages
    int sum = 0;
    for (size_t i = 0; i < kBytes; i += kPage) sum += file.data()[i];
    ASSERT_EQ(sum, 'w' * static_cast<int>(kBytes / kPage));
    ASSERT_GE(mapping_rss_kb(file.data()), static_cast<int64_t>(kBytes / 1024));
    // Two ranges (codes and scales, as a compressed-tensors matrix has), whole 2 MiB extents (the
    // kernel may map the file's large folios whole, and drops such a mapping whole).
    auto copy = std::make_shared<DeferredCopy>();
    copy->matrix = Matrix::owned(tensor::WeightType::F32, 1, 8);
    DeferredLayouts::Job j;
    j.copy = copy;
    j.build = [](Matrix&) {};
    j.sources = {{file.data(), kBytes / 2}, {file.data() + kBytes / 2, kBytes / 2}};
    std::vector<DeferredLayouts::Job> jobs;
    jobs.push_back(std::move(j));
    DeferredLayouts d(std::move(jobs), nullptr);
    d.wait();
    EXPECT_TRUE(copy->published.load());
    EXPECT_EQ(mapping_rss_kb(file.data()), 0);
}

}  // namespace
}  // namespace warden::model

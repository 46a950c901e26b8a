#pragma once
// Importance matrices computed by warden itself (`warden imatrix`), in the format llama.cpp's
// llama-imatrix writes and llama-quantize / `warden quantize --imatrix` read (quant/imatrix.h):
// for every layer matrix, the sum over calibration tokens of each input column's squared
// activation, and the number of tokens (per expert, for stacked MoE experts: the tokens routed to
// it). The collector is a model::ActivationObserver on a Transformer; the names are the GGUF
// tensor names of the model's matrices ("blk.3.attn_q.weight"; routed experts stacked as
// "blk.3.ffn_up_exps.weight" with one matrix per expert), whatever format the model was loaded
// from, so an imatrix computed on a Hugging Face checkpoint serves its GGUF conversion and back.
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/activation_observer.h"
#include "model/model.h"
#include "quant/imatrix.h"

namespace warden::convert {

class ImatrixCollector final : public model::ActivationObserver {
  public:
    struct Entry {
        int64_t cols = 0;
        int64_t n_mat = 1;           // experts of a stacked tensor, else 1
        std::vector<double> sums;    // [n_mat][cols] sum of x^2
        std::vector<double> counts;  // [n_mat] tokens seen
    };

    // process_output: collect the output head too, as "output.weight" (llama-imatrix's
    // --process-output), where the model has one of its own; a head tied to the embeddings is
    // never collected (llama-imatrix names it token_embd.weight and skips it).
    explicit ImatrixCollector(const model::Model& m, bool process_output = false);
    void observe(const model::Matrix& m, const float* x, int64_t n_rows) override;

    const std::map<std::string, Entry>& entries() const { return entries_; }
    // The importances `--imatrix` would read back from write_gguf's file: sums / count, 1 for a
    // matrix that saw no token.
    quant::Imatrix importance(int32_t chunks, const std::string& dataset) const;
    // llama.cpp's GGUF imatrix: NAME.in_sum2 F32 [cols, n_mat], NAME.counts F32 [1, n_mat],
    // imatrix.datasets / imatrix.chunk_count / imatrix.chunk_size. Written atomically.
    void write_gguf(const std::string& path, const std::vector<std::string>& datasets,
                    int64_t chunks, int64_t chunk_size) const;

  private:
    struct Slot {
        Entry* entry;
        int64_t index;  // expert
    };
    void add(const model::Matrix& m, const std::string& name, int64_t index = 0, int64_t n_mat = 1);
    std::map<std::string, Entry> entries_;
    std::unordered_map<const model::Matrix*, Slot> slots_;
};

}  // namespace warden::convert

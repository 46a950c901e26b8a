#include "formats/gguf_names.h"

#include <map>

namespace warden::formats {

std::string gguf_layer_name(const std::string& hf) {
    static const std::map<std::string, std::string> names = {
        {"mlp.gate.weight", "ffn_gate_inp.weight"},
        {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
        {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
        {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
        {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},
        {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
        {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
        {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
        {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
        {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
        {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
        {"self_attn.k_b_proj.weight", "attn_k_b.weight"},
        {"self_attn.v_b_proj.weight", "attn_v_b.weight"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},
        {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}};
    if (auto it = names.find(hf); it != names.end()) return it->second;
    static const std::string experts = "mlp.experts.";
    if (hf.rfind(experts, 0) == 0) {
        const size_t dot = hf.find('.', experts.size());
        if (dot != std::string::npos) {
            const std::string e = hf.substr(experts.size(), dot - experts.size());
            const std::string w = hf.substr(dot + 1);
            for (const char* p : {"gate", "up", "down"})
                if (w == std::string(p) + "_proj.weight")
                    return "ffn_" + std::string(p) + "_exps.weight[" + e + "]";
        }
    }
    return hf;
}

std::string gguf_tensor_name(const std::string& hf) {
    if (hf == "model.embed_tokens.weight") return "token_embd.weight";
    if (hf == "lm_head.weight") return "output.weight";
    if (hf == "model.norm.weight") return "output_norm.weight";
    static const std::string layers = "model.layers.";
    if (hf.rfind(layers, 0) != 0) return "";
    const size_t dot = hf.find('.', layers.size());
    if (dot == std::string::npos || dot == layers.size()) return "";
    const std::string idx = hf.substr(layers.size(), dot - layers.size());
    if (idx.find_first_not_of("0123456789") != std::string::npos) return "";
    const std::string rest = hf.substr(dot + 1), g = gguf_layer_name(rest);
    if (g == rest) return "";
    return "blk." + idx + "." + g;
}

}  // namespace warden::formats

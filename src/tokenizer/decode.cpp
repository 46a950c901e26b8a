#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace warden::tokenizer {

using detail::Utf8Status;

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    std::string out;
    bool at_start = true;
    for (int32_t id : ids) {
        out += token_piece(id, at_start);  // throws for an out-of-range id
        at_start = is_special_or_added(id);
    }
    return out;
}

std::string StreamingDecoder::push(int32_t id) {
    pending_ += tok_.token_piece(id, at_text_start_);
    at_text_start_ = tok_.is_special_or_added(id);
    std::string out;
    size_t i = 0;
    while (i < pending_.size()) {
        const detail::Utf8Step st = detail::utf8_next(pending_, i);
        if (st.status == Utf8Status::Incomplete) break;  // wait for the rest of the character
        if (st.status == Utf8Status::Valid) {
            out.append(pending_, i, st.len);
        } else {
            out.append(detail::kReplacementChar);
        }
        i += st.len;
    }
    pending_.erase(0, i);
    return out;
}

std::string StreamingDecoder::flush() {
    std::string out = detail::sanitize_utf8(pending_);
    pending_.clear();
    at_text_start_ = true;
    return out;
}

}  // namespace warden::tokenizer

#include "engine/request.h"

namespace warden::engine {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::Length:
            return "length";
        case FinishReason::Stop:
            return "stop";
        case FinishReason::IntegrityError:
            return "integrity_error";
        case FinishReason::Cancelled:
            return "cancelled";
        case FinishReason::Rejected:
            return "rejected";
        case FinishReason::Timeout:
            return "timeout";
        case FinishReason::Unavailable:
            return "unavailable";
    }
    return "?";
}

}  // namespace warden::engine

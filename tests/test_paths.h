#pragma once
// Paths of test data, from compile definitions set by CMake.
#include <string>

namespace warden::test {

inline std::string source_dir() {
    return WARDEN_SOURCE_DIR;
}
inline std::string shared_dir() {
    return WARDEN_SHARED_DIR;
}
inline std::string golden_model(const std::string& name) {
    return source_dir() + "/tests/golden/models/" + name;
}
inline std::string default_model() {
    return source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace warden::test

#include "util/json_file.h"

#include <fstream>
#include <sstream>

#include "util/error.h"

namespace warden::util {

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot open '" + path + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw Error("cannot read '" + path + "'");
    return ss.str();
}

namespace {

template <typename Json>
Json parse_json_file(const std::string& path) {
    const std::string text = read_text_file(path);
    try {
        return Json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw Error("'" + path + "' is not valid JSON: " + std::string(e.what()));
    }
}

}  // namespace

nlohmann::json read_json_file(const std::string& path) {
    return parse_json_file<nlohmann::json>(path);
}

nlohmann::ordered_json read_ordered_json_file(const std::string& path) {
    return parse_json_file<nlohmann::ordered_json>(path);
}

}  // namespace warden::util

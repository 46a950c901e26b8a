#include "util/replace_file.h"

#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace warden::util {

void replace_file(const std::string& path, const std::function<void(std::ostream& out)>& write) {
    const std::string tmp = path + ".tmp";
    std::error_code ec;
    try {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) throw Error("cannot create '" + tmp + "'");
        write(f);
        if (!f) throw Error("write to '" + tmp + "' failed (disk full?)");
    } catch (...) {
        std::filesystem::remove(tmp, ec);
        throw;
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw Error("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
}

}  // namespace warden::util

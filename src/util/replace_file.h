#pragma once
// Writing a whole file so that a failure never leaves a partial one at its path.
#include <functional>
#include <ostream>
#include <string>

namespace warden::util {

// Writes `path` through `path + ".tmp"`: `write(out)` fills the stream (it may stop early once
// the stream has failed), then the temporary replaces `path` by rename. On any error (the
// stream's, or an exception from `write`) the temporary is removed and `path` is untouched.
// Throws Error "cannot create 'TMP'", "write to 'TMP' failed (disk full?)" or "cannot rename".
void replace_file(const std::string& path, const std::function<void(std::ostream& out)>& write);

}  // namespace warden::util

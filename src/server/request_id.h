#pragma once
// Response ids ("chatcmpl-..." / "cmpl-..."): random, so they reveal nothing of the server's
// volume or of other clients' requests.
#include <string>
#include <string_view>

namespace warden::server {

// `prefix` followed by 24 alphanumerics drawn from the kernel's CSPRNG (getrandom).
std::string random_id(std::string_view prefix);

}  // namespace warden::server

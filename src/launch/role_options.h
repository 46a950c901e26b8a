#pragma once
// The flags of `warden serve`'s disaggregated roles (transfer/disagg_roles.h).
#include <CLI/CLI.hpp>

#include "transfer/disagg_roles.h"

namespace warden::cli {

void add_role_options(CLI::App& app, transfer::RoleOptions& o);

}  // namespace warden::cli

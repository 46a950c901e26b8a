#pragma once
// The subcommands of the `warden` binary: each cmd_*.cpp registers its flags and its action.
#include <CLI/CLI.hpp>

namespace warden::cli {

// Subcommand registration; each returns the callback's exit code through `rc`.
void register_run(CLI::App& app, int& rc);
void register_info(CLI::App& app, int& rc);
void register_tokenize(CLI::App& app, int& rc);
void register_pretokenizers(CLI::App& app, int& rc);
void register_logits(CLI::App& app, int& rc);
void register_batch(CLI::App& app, int& rc);
void register_quantize(CLI::App& app, int& rc);
void register_imatrix(CLI::App& app, int& rc);
void register_serve(CLI::App& app, int& rc);
void register_router(CLI::App& app, int& rc);
void register_bench(CLI::App& app, int& rc);
void register_eval(CLI::App& app, int& rc);
void register_chat_template(CLI::App& app, int& rc);

}  // namespace warden::cli

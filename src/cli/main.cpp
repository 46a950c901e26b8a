// The `warden` binary: one executable, one subcommand per job.
#include <spdlog/sinks/stdout_color_sinks.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "launch/common.h"
#include "util/error.h"
#include "util/log.h"
#include "util/version.h"

int main(int argc, char** argv) {
    // Logs go to stderr so stdout carries only the command's output.
    spdlog::set_default_logger(spdlog::stderr_color_mt("warden"));
    spdlog::set_level(spdlog::level::warn);
    CLI::App app{"warden: an LLM inference server for many tenants"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("warden ") + warden::util::kVersion);
    app.add_option_function<std::string>(
           "--log-level", [](const std::string& l) { warden::util::set_log_level(l); },
           "log level before the command: trace, debug (start-up phase timings), info, warn "
           "(default), error, off")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
        ->trigger_on_parse();
    int rc = 0;
    warden::cli::register_run(app, rc);
    warden::cli::register_info(app, rc);
    warden::cli::register_tokenize(app, rc);
    warden::cli::register_pretokenizers(app, rc);
    warden::cli::register_logits(app, rc);
    warden::cli::register_batch(app, rc);
    warden::cli::register_quantize(app, rc);
    warden::cli::register_imatrix(app, rc);
    warden::cli::register_serve(app, rc);
    warden::cli::register_router(app, rc);
    warden::cli::register_bench(app, rc);
    warden::cli::register_eval(app, rc);
    warden::cli::register_chat_template(app, rc);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "warden: error: %s (see --help)\n", e.what());
        return 2;
    } catch (const warden::util::Error& e) {
        std::fprintf(stderr, "warden: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "warden: error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "warden: internal error: %s\n", e.what());
        return 1;
    }
    return rc;
}

#include "daemon_support/daemon_flags.h"

#include <unistd.h>

#include <csignal>
#include <fstream>
#include <iostream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace tessera::daemon {
namespace {

// "--name=value ..." for every option of `app` but --help, as given or by default.
std::string EffectiveFlags(const CLI::App& app, const std::set<std::string>& secret_flags) {
  std::string text;
  for (const CLI::Option* option : app.get_options()) {
    if (option == app.get_help_ptr() || option->get_lnames().empty()) continue;
    const std::string& name = option->get_lnames().front();
    std::string value;
    if (option->count() > 0) {
      for (const std::string& r : option->results()) value += (value.empty() ? "" : ",") + r;
    } else {
      value = option->get_default_str();
    }
    if (secret_flags.count(name) > 0) value = value.empty() ? "(unset)" : "(set)";
    text += (text.empty() ? "--" : " --") + name + "=" + value;
  }
  return text;
}

}  // namespace

std::optional<int> ParseFlagsAndStartLogging(CLI::App& app, int argc, char** argv,
                                             const std::set<std::string>& secret_flags) {
  std::string level = "info";
  app.add_option("--log_level", level, "least severe log lines written")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  // Every bound variable still holds its default: keep it for --help and the startup line.
  for (CLI::Option* option : app.get_options()) option->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  std::shared_ptr<spdlog::logger> logger = spdlog::stderr_color_mt(app.get_name());
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
  spdlog::info("starting with {}", EffectiveFlags(app, secret_flags));
  return std::nullopt;
}

void AddDurationFlag(CLI::App& app, const std::string& name, absl::Duration* value,
                     const std::string& help, absl::Duration min, absl::Duration max) {
  app.add_option_function<std::string>(
         name,
         [name, value, min, max](const std::string& text) {
           absl::Duration parsed;
           if (!absl::ParseDuration(text, &parsed)) {
             throw CLI::ValidationError(name, "'" + text + "' is not a duration like 500ms or 3s");
           }
           if (parsed < min || parsed > max) {
             throw CLI::ValidationError(
                 name, absl::StrCat("'", text, "' is not in ", absl::FormatDuration(min), "..",
                                    absl::FormatDuration(max)));
           }
           *value = parsed;
         },
         absl::StrCat(help, " (", absl::FormatDuration(min), "..", absl::FormatDuration(max), ")"))
      ->type_name("DURATION")
      ->default_str(absl::FormatDuration(*value));
}

void IgnoreBrokenPipes() { std::signal(SIGPIPE, SIG_IGN); }

void AddMetricsPortFlag(CLI::App& app, int* port) {
  app.add_option("--metrics_port", *port,
                 "serve Prometheus metrics on http://LISTEN_HOST:PORT/metrics; 0 picks a free "
                 "port, -1 serves none")
      ->check(CLI::Range(-1, 65535));
}

absl::StatusOr<std::unique_ptr<metrics::HttpServer>> ServeMetrics(const std::string& daemon,
                                                                  const std::string& listen_address,
                                                                  int port) {
  if (port < 0) return nullptr;
  std::string host = listen_address.substr(0, listen_address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  metrics::Registry& registry = metrics::DefaultRegistry();
  registry.AddCallback("process_resident_memory_bytes", "resident memory of this process (host)",
                       {}, [] {
                         long pages = 0, resident = 0;
                         std::ifstream("/proc/self/statm") >> pages >> resident;
                         return std::vector<metrics::Sample>{
                             {{}, static_cast<double>(resident) * sysconf(_SC_PAGESIZE)}};
                       });
  absl::StatusOr<std::unique_ptr<metrics::HttpServer>> server =
      metrics::HttpServer::Start(host, port, &registry);
  if (!server.ok()) return server.status();
  const std::string url_host = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  const std::string url = absl::StrCat("http://", url_host, ":", (*server)->port(), "/metrics");
  spdlog::info("serving metrics on {}", url);
  std::cout << daemon << " metrics on " << url << std::endl;
  return server;
}

}  // namespace tessera::daemon

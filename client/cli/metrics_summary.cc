#include "client/cli/metrics_summary.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "metrics/http_client.h"
#include "metrics/text_format.h"

namespace tessera {
namespace {

absl::StatusOr<std::string> Scrape(const std::string& url) {
  absl::StatusOr<metrics::HttpResponse> response = metrics::HttpGet(url);
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::UnavailableError(absl::StrCat(url, " answered HTTP ", response->status));
  }
  return std::move(response->body);
}

// The samples of `name` in `scrape` summed by their `code` label, such as {"OK": 401}.
std::map<std::string, double> SumByCode(const std::string& scrape, const std::string& name) {
  std::map<std::string, double> by_code;
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (!absl::StartsWith(line, name + "{")) continue;
    const size_t at = line.find("code=\"");
    if (at == absl::string_view::npos) continue;
    const size_t end = line.find('"', at + 6);
    by_code[std::string(line.substr(at + 6, end - at - 6))] += metrics::SumSamples(line, name).sum;
  }
  return by_code;
}

}  // namespace

absl::Status PrintMetricsSummary(const LocalCluster& cluster, std::ostream& out) {
  if (cluster.coordinator_metrics_url().empty()) {
    return absl::FailedPreconditionError("the cluster was started without metrics");
  }
  absl::StatusOr<std::string> coordinator = Scrape(cluster.coordinator_metrics_url());
  if (!coordinator.ok()) return coordinator.status();
  const double rpcs = metrics::SumSamples(*coordinator, "tessera_rpc_server_handled_total").sum;
  std::string failed;
  for (const auto& [code, count] : SumByCode(*coordinator, "tessera_rpc_server_handled_total")) {
    if (code != "OK") absl::StrAppend(&failed, failed.empty() ? "" : ", ", count, " ", code);
  }
  double commands = 0, collectives = 0, collective_bytes = 0, shards = 0;
  for (int i = 0; i < cluster.num_workers(); ++i) {
    absl::StatusOr<std::string> worker = Scrape(cluster.worker_metrics_url(i));
    if (!worker.ok()) return worker.status();
    commands += metrics::SumSamples(*worker, "tessera_worker_commands_total").sum;
    collectives += metrics::SumSamples(*worker, "tessera_collectives_total").sum;
    collective_bytes += metrics::SumSamples(*worker, "tessera_collective_bytes_total").sum;
    shards += metrics::SumSamples(*worker, "tessera_shards").sum;
  }
  out << "Metrics, scraped from each daemon's /metrics (" << cluster.coordinator_metrics_url()
      << " and " << cluster.num_workers() << " workers):\n"
      << absl::StrFormat("  coordinator answered %.0f RPCs (not OK: %s)\n", rpcs,
                         failed.empty() ? "none" : failed)
      << absl::StrFormat(
             "  workers ran %.0f commands and %.0f collective calls moving %.1f MiB; %.0f shards "
             "held\n",
             commands, collectives, collective_bytes / (1 << 20), shards);
  return absl::OkStatus();
}

}  // namespace tessera

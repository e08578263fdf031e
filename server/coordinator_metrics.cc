#include "server/coordinator_metrics.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// One sample per key of `counts`, labelled with the key.
std::vector<metrics::Sample> CountSamples(const std::map<std::string, int64_t>& counts) {
  std::vector<metrics::Sample> samples;
  for (const auto& [key, count] : counts) {
    samples.push_back({{key}, static_cast<double>(count)});
  }
  return samples;
}

}  // namespace

void ExportCoordinatorMetrics(metrics::Registry* registry, const WorkerRegistry* workers,
                              Dispatcher* dispatcher, const DTensorTable* tensors,
                              const ModuleTable* modules, const ServedModels* served) {
  registry->AddCallback("tessera_workers",
                        "workers that ever registered, live or dead (missed heartbeats)", {"state"},
                        [workers] {
                          std::map<std::string, int64_t> counts = {{"live", 0}, {"dead", 0}};
                          for (const v1::WorkerInfo& w : workers->List())
                            ++counts[w.alive() ? "live" : "dead"];
                          return CountSamples(counts);
                        });
  auto per_worker = [workers](bool budget) {
    std::vector<metrics::Sample> samples;
    for (const v1::WorkerInfo& w : workers->List()) {
      samples.push_back({{absl::StrCat(w.worker_id()), w.device()},
                         static_cast<double>(budget ? w.memory_budget_bytes() : w.used_bytes())});
    }
    return samples;
  };
  registry->AddCallback("tessera_worker_memory_used_bytes",
                        "bytes of shards each worker holds (host memory), as of its last heartbeat",
                        {"worker", "device"}, [per_worker] { return per_worker(false); });
  registry->AddCallback("tessera_worker_memory_budget_bytes",
                        "each worker's budget for shards (--memory_budget)", {"worker", "device"},
                        [per_worker] { return per_worker(true); });
  registry->AddCallback("tessera_dtensors", "DTensors held, by mesh", {"mesh"}, [tensors] {
    std::map<std::string, int64_t> counts;
    for (const auto& t : tensors->OnMesh("")) ++counts[t->mesh->name];
    return CountSamples(counts);
  });
  registry->AddCallback("tessera_modules", "modules held, by mesh", {"mesh"}, [modules] {
    std::map<std::string, int64_t> counts;
    for (const auto& m : modules->List()) ++counts[m->mesh->name];
    return CountSamples(counts);
  });
  auto load = [dispatcher](int64_t Dispatcher::Load::*field) {
    return std::vector<metrics::Sample>{
        {{}, static_cast<double>(dispatcher->CurrentLoad().*field)}};
  };
  registry->AddCallback(
      "tessera_coordinator_posts_in_flight",
      "commands posted to workers (one per op, to every worker of its mesh) not yet answered", {},
      [load] { return load(&Dispatcher::Load::posts_in_flight); });
  registry->AddCallback("tessera_coordinator_commands_queued",
                        "commands queued for a worker while its previous batch is in flight", {},
                        [load] { return load(&Dispatcher::Load::commands_queued); });
  registry->AddCallback("tessera_coordinator_batches_in_flight",
                        "command batches to workers in flight", {},
                        [load] { return load(&Dispatcher::Load::batches_in_flight); });
  registry->AddCallback(
      "tessera_served_models", "model versions published for inference", {}, [served] {
        return std::vector<metrics::Sample>{{{}, static_cast<double>(served->List().size())}};
      });
}

}  // namespace tessera

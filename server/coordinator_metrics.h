#ifndef TESSERA_SERVER_COORDINATOR_METRICS_H_
#define TESSERA_SERVER_COORDINATOR_METRICS_H_

#include "metrics/registry.h"
#include "server/cluster/dispatcher.h"
#include "server/cluster/worker_registry.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/module_table.h"
#include "server/tables/served_models.h"

namespace tessera {

// Adds to `registry` the coordinator's state, read at every scrape: tessera_workers{state},
// tessera_worker_memory_used_bytes and tessera_worker_memory_budget_bytes{worker,device} (as the
// workers last reported them), tessera_dtensors{mesh}, tessera_modules{mesh} and
// tessera_served_models, and the dispatcher's tessera_coordinator_posts_in_flight,
// tessera_coordinator_commands_queued and tessera_coordinator_batches_in_flight. Everything passed
// must outlive the registry's scrapes.
void ExportCoordinatorMetrics(metrics::Registry* registry, const WorkerRegistry* workers,
                              Dispatcher* dispatcher, const DTensorTable* tensors,
                              const ModuleTable* modules, const ServedModels* served);

}  // namespace tessera

#endif  // TESSERA_SERVER_COORDINATOR_METRICS_H_

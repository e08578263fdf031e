#ifndef TESSERA_SERVER_DISPATCHER_H_
#define TESSERA_SERVER_DISPATCHER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/worker_registry.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

// Sends one command to many workers at once: the same payload, each with its own sequence and
// incarnation, all RPCs in flight together, so the cost per op stays flat as workers grow.
class Dispatcher {
 public:
  Dispatcher(WorkerRegistry* registry, std::string secret);

  // Runs `command` on every worker of `worker_ids` (in that order) and returns their replies in the
  // same order. Each RPC has deadline `timeout`. On failure returns the most telling error, naming
  // the worker: a worker that is gone (UNAVAILABLE) before one that timed out, before others.
  absl::StatusOr<std::vector<v1::CommandReply>> Run(const std::vector<int64_t>& worker_ids,
                                                    const v1::Command& command,
                                                    absl::Duration timeout);

  // Called once when every worker of a Post replied: the combined status (as Run's) and the
  // replies in worker order.
  using Done = std::function<void(absl::Status, std::vector<v1::CommandReply>)>;

  // Sends `command` as Run does but returns at once; `done` runs on a gRPC thread when every
  // worker replied. Blocks while kMaxInFlight posts are outstanding (back-pressure), so a client
  // that pipelines ops cannot queue unbounded work on the workers.
  void Post(const std::vector<WorkerHandle>& workers, const v1::Command& command,
            absl::Duration timeout, Done done);
  static constexpr int kMaxInFlight = 256;

  // Attaches the cluster secret to a call to a worker.
  void Authorize(grpc::ClientContext* context) const;

  WorkerRegistry& registry() { return *registry_; }

 private:
  // The most telling error among the replies, naming the worker (a dead one first).
  absl::Status Combine(const std::vector<WorkerHandle>& workers,
                       const std::vector<grpc::Status>& statuses) const;

  WorkerRegistry* registry_;
  const std::string secret_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_DISPATCHER_H_

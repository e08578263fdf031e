#ifndef TESSERA_SERVER_CLUSTER_WORKER_REGISTRY_H_
#define TESSERA_SERVER_CLUSTER_WORKER_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "server/cluster/state_store.h"
#include "tessera/v1/mesh.pb.h"
#include "tessera/v1/registry.pb.h"
#include "tessera/v1/worker.grpc.pb.h"

namespace tessera {

// A registered worker as the dispatcher needs it: where to send commands and under which
// incarnation. Shared, immutable once handed out.
struct WorkerHandle {
  int64_t id = 0;
  int64_t incarnation = 0;
  std::string address;
  std::string device;
  std::shared_ptr<v1::Worker::Stub> stub;
  int64_t memory_budget_bytes = 0;  // its budget for shards
  std::string grant_key;            // signs grants of direct uploads to this incarnation
};

// Every worker that ever registered, with liveness by heartbeat and the per-worker command
// sequence. A worker keeps its id across restarts (keyed by address); each registration is a new
// incarnation whose sequence starts again at 1. Incarnations are unique across coordinator
// processes too (a random epoch per process start in their high bits), so that a worker registered
// with an earlier coordinator process is refused and registers again. Thread-safe.
class WorkerRegistry {
 public:
  WorkerRegistry(absl::Duration heartbeat_interval, absl::Duration dead_after);

  // The credentials of the channels to workers registered from now on (plaintext by default).
  void set_worker_credentials(std::shared_ptr<grpc::ChannelCredentials> credentials) {
    worker_credentials_ = std::move(credentials);
  }

  v1::RegisterReply Register(const v1::RegisterRequest& request);

  // Records every new worker's id by address in `store` from now on (before its registration is
  // answered). Not thread-safe: call before serving.
  void RecordIn(StateStore* store) { store_ = store; }
  // Takes back the ids by address that an earlier coordinator process recorded: each such worker
  // is listed dead until it registers again, and that registration keeps its tensors but those not
  // in `expected(id)` (the worker-side names the recovered records place on it). Call before
  // serving.
  void Restore(const std::map<std::string, int64_t>& ids_by_address,
               std::function<std::set<std::string>(int64_t)> expected);
  // The tensors a restored worker held when it registered again; nullopt while it has not (or was
  // never restored).
  std::optional<std::set<std::string>> HeldWhenRecovered(int64_t id) const;
  // Whether worker `id` sent a heartbeat of its current incarnation since it registered: it began
  // that incarnation, so commands for it are not refused as meant for a later one.
  bool BeganIncarnation(int64_t id) const;
  // Whether worker `id` sent a heartbeat of its current incarnation later than `t`: it runs now
  // under the incarnation Get hands out, not as a predecessor whose heartbeats have not lapsed yet.
  bool HeardFromSince(int64_t id, absl::Time t) const;
  // When worker `id`'s current incarnation registered; InfinitePast if unknown or never.
  absl::Time RegisteredAt(int64_t id) const;
  // The tensors worker `id` kept when incarnation `incarnation` registered again after the
  // coordinator restarted (told keep_tensors); nullopt if that incarnation did not (it started
  // empty) or is not the worker's current one.
  std::optional<std::set<std::string>> KeptBy(int64_t id, int64_t incarnation) const;
  // NOT_FOUND for an unknown id, FAILED_PRECONDITION for a stale incarnation.
  absl::Status Heartbeat(const v1::HeartbeatRequest& request);

  // Counts incarnation `incarnation` of worker `id` dead at once: a call to it failed because it
  // could not be reached (`reason`, e.g. connection refused), so waiting for its heartbeats to
  // lapse would only let more calls fail on its peers in less telling ways. A heartbeat of that
  // incarnation makes it live again.
  void MarkUnreachable(int64_t id, int64_t incarnation, const std::string& reason);
  // The live handle of worker `id`; UNAVAILABLE naming it (id and address) and saying why if it is
  // dead, NOT_FOUND if unknown.
  absl::StatusOr<WorkerHandle> Get(int64_t id) const;
  // The handle of worker `id` if it is only silent: it missed its heartbeats but no call found it
  // unreachable (a paused or overloaded process may resume with everything it held); nullopt
  // otherwise (alive, unknown, unreachable).
  std::optional<WorkerHandle> Silent(int64_t id) const;
  // Ids of the live workers of `device_type` ("cpu" or "cuda"): ascending, those that heartbeat on
  // time first, then those that missed heartbeats (a last one older than two intervals) but are
  // not yet dead, so that a new mesh takes a paused or overloaded worker only when it must.
  std::vector<int64_t> LiveWorkers(const std::string& device_type) const;
  // `ids` in node-major order, for a mesh's ranks: grouped by the host each worker registered from
  // (its RegisterRequest.hostname; a pod's name on Kubernetes, so a GPU node's workers share one),
  // the groups in the order of their smallest id, ids ascending within a group; so that the last
  // mesh dims (tp) stay within a node. Unknown ids come last, ascending.
  std::vector<int64_t> NodeMajor(std::vector<int64_t> ids) const;
  // The dead worker among `ids`, if any: the reason a mesh over them is broken.
  absl::Status CheckAlive(const std::vector<int64_t>& ids) const;
  std::vector<v1::WorkerInfo> List() const;

  // Reserves the next command sequence of each worker in `workers`, all under one lock, so that
  // commands of different meshes reach every shared worker in the same relative order. Reserved
  // through Dispatcher::Reserve, which makes each a SequenceLease (used or released).
  std::vector<int64_t> NextSequences(const std::vector<WorkerHandle>& workers);

 private:
  std::shared_ptr<grpc::ChannelCredentials> worker_credentials_ =
      grpc::InsecureChannelCredentials();
  struct Entry {
    WorkerHandle handle;
    v1::RegisterRequest info;
    absl::Time last_heartbeat;
    absl::Time registered = absl::InfinitePast();  // when the current incarnation registered
    int64_t used_bytes = 0;
    // The device's memory as the last heartbeat gave it; -1 unknown.
    int64_t device_allocated_bytes = -1, device_free_bytes = -1, device_total_bytes = -1;
    int64_t next_sequence = 1;
    std::string unreachable;  // why a call could not reach it since its last heartbeat, if one
    bool awaiting_recovery = false;  // restored from the store, not registered again yet
    bool heartbeat_since_register = false;
    std::optional<std::set<std::string>> held_when_recovered;
    int64_t recovered_incarnation = -1;  // the incarnation that registered with held_when_recovered
  };
  bool Alive(const Entry& e, absl::Time now) const {
    return e.unreachable.empty() && now - e.last_heartbeat <= dead_after_;
  }
  bool OnTime(const Entry& e, absl::Time now) const {
    return now - e.last_heartbeat <= 2 * heartbeat_interval_;
  }

  const absl::Duration heartbeat_interval_;
  const absl::Duration dead_after_;
  mutable absl::Mutex mu_;
  std::map<int64_t, Entry> workers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> id_by_address_ ABSL_GUARDED_BY(mu_);
  int64_t next_incarnation_ ABSL_GUARDED_BY(mu_);  // this process's epoch, then counting up
  StateStore* store_ = nullptr;
  std::function<std::set<std::string>(int64_t)> expected_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_CLUSTER_WORKER_REGISTRY_H_

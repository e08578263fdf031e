#ifndef TESSERA_INCLUDE_TESSERA_MESH_H_
#define TESSERA_INCLUDE_TESSERA_MESH_H_

// Workers and meshes on the service: init_device_mesh, a mesh's process groups (mesh["tp"]), and
// what the coordinator reports about workers and meshes.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/shape.h"
#include "core/sharding/device_mesh.h"

namespace tessera::client {

class Session;

// The process groups along one dim of a mesh, as torch's mesh.get_group(dim), or the whole mesh
// as one group: a collective on it runs in every one of those groups at once. The service checks
// the names when the group is used.
struct ProcessGroup {
  std::string mesh = {};  // Mesh name.
  std::string dim = {};   // Dim name ("tp") or index ("1"); empty for the whole mesh.
};

// A mesh on the service, as torch's DeviceMesh: its name and its layout of workers as ranks.
struct Mesh {
  std::string name;
  DeviceMesh mesh;

  // mesh["tp"]: the groups along dim "tp" (a name or an index).
  ProcessGroup operator[](std::string dim) const { return {name, std::move(dim)}; }
  // The whole mesh as one group.
  ProcessGroup group() const { return {name, ""}; }
};

// A mesh as the coordinator reports it.
struct MeshInfo : Mesh {
  bool ready = false;                 // Communicators are up and every worker is alive.
  std::string broken_reason;          // Why it is not ready, when it is not.
  std::vector<std::string> tensors;   // Names of the tensors on it.
  absl::Duration collective_timeout;  // How long a collective may wait for its peers.
};

// A registered worker as the coordinator reports it.
struct WorkerInfo {
  int64_t worker_id = 0;              // Its global rank, as meshes name it.
  std::string address;                // Where its Worker service listens.
  std::string device;                 // "cpu" or "cuda:N".
  bool alive = false;                 // False once it missed its heartbeats.
  int64_t memory_budget_bytes = 0;    // Its budget for shards.
  int64_t used_bytes = 0;             // Bytes of shards it reported last.
  int64_t incarnation = 0;            // Changes when it registers again.
  absl::Duration last_heartbeat_age;  // Time since its last heartbeat.
  std::string hostname;               // Host it runs on.
  int64_t pid = 0;                    // Its process id.
  std::string device_name;            // A GPU's model ("NVIDIA H100 80GB HBM3"); empty for cpu.
  // Its device's memory as last reported: allocated by the worker (shards and temporaries), free
  // and in all on the device; -1 where unknown (host memory, or before its first heartbeat).
  int64_t device_allocated_bytes = -1;
  int64_t device_free_bytes = -1;
  int64_t device_total_bytes = -1;
};

// Where and how InitDeviceMesh sets a mesh up.
struct MeshOptions {
  std::vector<int64_t> worker_ids = {};  // Workers as ranks, row-major; default: the first live.
  absl::Duration collective_timeout = absl::Seconds(30);  // How long a collective may wait.
};

// init_device_mesh(device_type, shape, mesh_dim_names) as mesh `name` (unique on the service);
// sets up its communicators before returning.
absl::StatusOr<MeshInfo> InitDeviceMesh(Session& session, const std::string& device_type,
                                        const Shape& shape,
                                        const std::vector<std::string>& dim_names,
                                        const std::string& name, const MeshOptions& options = {});
// An existing mesh by name; NOT_FOUND naming it if there is none.
absl::StatusOr<MeshInfo> GetMesh(Session& session, const std::string& name);

}  // namespace tessera::client

#endif  // TESSERA_INCLUDE_TESSERA_MESH_H_

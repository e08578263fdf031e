#ifndef TESSERA_INCLUDE_TESSERA_DTENSOR_H_
#define TESSERA_INCLUDE_TESSERA_DTENSOR_H_

// DTensors on the service with PyTorch's names: DistributeTensor, FromLocal, the factories, and a
// DTensor's Redistribute / FullTensor / ToLocal and ops. Every call returns a status; a DTensor
// handle frees its remote tensor when the last copy is dropped.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/op_call.h"
#include "core/sharding/placement.h"
#include "core/sharding/redistribute_planner.h"
#include "tessera/mesh.h"

namespace tessera::client {

class Session;
namespace internal {
class StreamOutcome;
}  // namespace internal

// Called with (bytes done, bytes in all) as a transfer proceeds.
using Progress = std::function<void(int64_t, int64_t)>;

// Where a DTensor stands: ops return before the workers finish, so a tensor may still be pending.
enum class TensorState : int {
  kReady = 1,    // Every rank holds its shard.
  kPending = 2,  // Commands that write it are still running on the workers.
  kFailed = 3,   // A command writing it failed; DTensorInfo::error says why.
};

// A DTensor as the coordinator holds it.
struct DTensorInfo {
  std::string name;                // Unique name on the coordinator.
  std::string mesh;                // Name of the mesh it lives on.
  DTensorSpec spec;                // Global shape, dtype, mesh and placements.
  std::vector<LocalShard> shards;  // Every rank's shard, in the mesh's row-major rank order.
  int64_t nbytes = 0;              // Global size in bytes.
  std::string owner;               // Client id that made it (only the owner may free it).
  TensorState state = TensorState::kReady;
  std::string error;  // Why it failed, when it did.
};

// One input's implicit redistribution before an op.
struct InputRedistribution {
  std::string input;            // The input tensor.
  std::vector<Placement> from;  // Its placements.
  std::vector<Placement> to;    // What the chosen strategy needs.
  RedistributePlan plan;        // The collectives that ran.
};

// What a save wrote: the checkpoint directory, its new data directory (relative to it), how many
// block files (one per replica group) and the layout they were cut by.
struct SaveInfo {
  std::string path;
  std::string data_dir;
  int64_t files = 0;
  std::string saved_layout;
};

// A handle to a DTensor held by the service. Copies share it; the remote tensor is freed when the
// last copy goes (unless Detach()ed).
class DTensor {
 public:
  DTensor() = default;

  const std::string& name() const { return state_->info.name; }
  const DTensorInfo& info() const { return state_->info; }
  const DTensorSpec& spec() const { return state_->info.spec; }
  const std::vector<Placement>& placements() const { return state_->info.spec.placements; }
  const Shape& shape() const { return state_->info.spec.shape; }
  DType dtype() const { return state_->info.spec.dtype; }
  // Implicit redistributions the op that made this tensor ran (empty for other tensors).
  const std::vector<InputRedistribution>& redistributions() const {
    return state_->redistributions;
  }
  // The plan the redistribute that made this tensor ran on its mesh (empty for other tensors and
  // for moves across meshes).
  const RedistributePlan& plan() const { return state_->plan; }
  // Bytes a move across meshes that made this tensor streamed through the coordinator.
  int64_t relayed_bytes() const { return state_->relayed_bytes; }

  // DTensor.redistribute(placements): on its mesh, or to `mesh` (streamed through the
  // coordinator); `output` names the result (empty: the coordinator picks a name).
  absl::StatusOr<DTensor> Redistribute(const std::vector<Placement>& placements,
                                       const std::string& mesh = "", const std::string& output = "",
                                       PlannerKind planner = PlannerKind::kMinCost) const;
  // The plan Redistribute would run on the tensor's mesh, without running it.
  absl::StatusOr<RedistributePlan> ExplainRedistribute(
      const std::vector<Placement>& placements, PlannerKind planner = PlannerKind::kMinCost) const;
  absl::StatusOr<HostTensor> FullTensor(const Progress& progress = nullptr) const;
  absl::StatusOr<HostTensor> ToLocal(int64_t rank) const;
  // Waits until the workers have written it (at most `timeout`, by default the session's);
  // reports their error if they failed.
  absl::Status Synchronize(absl::Duration timeout = absl::ZeroDuration()) const;
  // Fresh metadata (state, error).
  absl::StatusOr<DTensorInfo> Refresh() const;
  // Saves the tensor into the checkpoint directory `path` on the workers' filesystem
  // (docs/checkpoints.md): every worker writes its own block, Partial dims reduced, replicas once;
  // the previous checkpoint at `path` stays readable until the new one is complete. Waits for it.
  absl::StatusOr<SaveInfo> Save(const std::string& path) const;
  // Keeps the remote tensor when the handles go.
  void Detach() { state_->owned = false; }
  // Frees the remote tensor now.
  absl::Status Free();

 private:
  friend struct DTensorAccess;
  // What a handle shares with its copies.
  struct State {
    State(std::shared_ptr<Session> s, DTensorInfo i, bool o)
        : session(std::move(s)), info(std::move(i)), owned(o) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State();  // frees the remote tensor if owned
    std::shared_ptr<Session> session;
    DTensorInfo info;
    bool owned = true;
    std::vector<InputRedistribution> redistributions;
    RedistributePlan plan;
    int64_t relayed_bytes = 0;
    // The op stream's outcome of the op that makes it, when one does (SessionOptions::op_stream).
    std::shared_ptr<internal::StreamOutcome> created;
  };

  std::shared_ptr<State> state_;
};

struct DistributeOptions {
  int64_t src_data_rank = 0;  // Rank (row-major mesh position) replicas are broadcast from.
  std::string name = {};      // Tensor name; empty: the coordinator picks one.
  Progress progress = {};
};
// distribute_tensor(tensor, mesh, placements, src_data_rank).
absl::StatusOr<DTensor> DistributeTensor(Session& session, const HostTensor& tensor,
                                         const Mesh& mesh, const std::vector<Placement>& placements,
                                         const DistributeOptions& options = {});

struct FromLocalOptions {
  bool run_check = false;           // Broadcast Replicate dims from coordinate 0, as DTensor does.
  std::optional<Shape> shape = {};  // The global shape; needed when shards are uneven.
  std::string name = {};            // Tensor name; empty: the coordinator picks one.
};
// DTensor.from_local: `locals[r]` is rank r's shard (row-major mesh position).
absl::StatusOr<DTensor> FromLocal(Session& session, absl::Span<const HostTensor> locals,
                                  const Mesh& mesh, const std::vector<Placement>& placements,
                                  const FromLocalOptions& options = {});

// The factories; values are the wire values of tessera.v1.Factory.
enum class Factory : int {
  kZeros = 1,  // torch.zeros
  kOnes = 2,   // torch.ones
  kFull = 3,   // torch.full(value)
  kEmpty = 4,  // torch.empty (contents unspecified)
  kRand = 5,   // torch.rand: uniform [0, 1), seeded; a shard equals that slice of the full tensor
  kRandn = 6,  // torch.randn: standard normal, seeded, likewise
};
// zeros, ones, full, empty, rand, randn on a mesh.
absl::StatusOr<DTensor> CreateTensor(Session& session, Factory factory, const Mesh& mesh,
                                     const Shape& shape, const std::vector<Placement>& placements,
                                     DType dtype = DType::kFloat32, double value = 0,
                                     uint64_t seed = 0, const std::string& name = "");
absl::StatusOr<DTensor> Zeros(Session& s, const Mesh& m, const Shape& shape,
                              const std::vector<Placement>& p, DType dtype = DType::kFloat32);
absl::StatusOr<DTensor> Ones(Session& s, const Mesh& m, const Shape& shape,
                             const std::vector<Placement>& p, DType dtype = DType::kFloat32);
absl::StatusOr<DTensor> Full(Session& s, const Mesh& m, const Shape& shape,
                             const std::vector<Placement>& p, double value,
                             DType dtype = DType::kFloat32);
absl::StatusOr<DTensor> Rand(Session& s, const Mesh& m, const Shape& shape,
                             const std::vector<Placement>& p, uint64_t seed,
                             DType dtype = DType::kFloat32);
absl::StatusOr<DTensor> Randn(Session& s, const Mesh& m, const Shape& shape,
                              const std::vector<Placement>& p, uint64_t seed,
                              DType dtype = DType::kFloat32);
struct LoadOptions {
  std::string tensor = {};  // The checkpoint's tensor; empty: its only one.
  std::string name = {};    // The new tensor's name; empty: the coordinator picks one.
};
// Loads a checkpoint (or a `tessera shard` directory) onto `mesh` as `placements`, whatever mesh
// and world size it was saved from; every worker reads only the bytes its shard needs.
absl::StatusOr<DTensor> LoadTensor(Session& session, const std::string& path, const Mesh& mesh,
                                   const std::vector<Placement>& placements,
                                   const LoadOptions& options = {});
// An existing tensor by name, not owned by the handle.
absl::StatusOr<DTensor> GetTensor(Session& session, const std::string& name);

// Runs `op` on `inputs` (all on one session and mesh) with sharding propagation.
absl::StatusOr<DTensor> RunOp(const OpCall& op, absl::Span<const DTensor> inputs,
                              const std::string& output = "");
absl::StatusOr<DTensor> Mm(const DTensor& a, const DTensor& b);
absl::StatusOr<DTensor> Matmul(const DTensor& a, const DTensor& b);
absl::StatusOr<DTensor> Addmm(const DTensor& bias, const DTensor& a, const DTensor& b,
                              double beta = 1, double alpha = 1);
absl::StatusOr<DTensor> Add(const DTensor& a, const DTensor& b);
absl::StatusOr<DTensor> Sub(const DTensor& a, const DTensor& b);
absl::StatusOr<DTensor> Mul(const DTensor& a, const DTensor& b);
absl::StatusOr<DTensor> Div(const DTensor& a, const DTensor& b);
absl::StatusOr<DTensor> Relu(const DTensor& x);
absl::StatusOr<DTensor> Gelu(const DTensor& x);
absl::StatusOr<DTensor> Tanh(const DTensor& x);
absl::StatusOr<DTensor> Sum(const DTensor& x, std::vector<int> dims = {}, bool keepdim = false);
absl::StatusOr<DTensor> Mean(const DTensor& x, std::vector<int> dims = {}, bool keepdim = false);
absl::StatusOr<DTensor> Max(const DTensor& x, std::vector<int> dims = {}, bool keepdim = false);
absl::StatusOr<DTensor> Transpose(const DTensor& x, int dim0, int dim1);
absl::StatusOr<DTensor> Cast(const DTensor& x, DType dtype);

}  // namespace tessera::client

#endif  // TESSERA_INCLUDE_TESSERA_DTENSOR_H_

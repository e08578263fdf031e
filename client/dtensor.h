#ifndef TESSERA_CLIENT_DTENSOR_H_
#define TESSERA_CLIENT_DTENSOR_H_

// The C++ client with PyTorch's names: InitDeviceMesh, DistributeTensor, FromLocal, DTensor's
// Redistribute / FullTensor / ToLocal, the factories and the ops. Every call returns a status; a
// DTensor handle frees its remote tensor when the last copy is dropped.

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/device_mesh.h"
#include "core/dtensor_spec.h"
#include "core/host_tensor.h"
#include "core/op_call.h"
#include "core/placement.h"
#include "grpcpp/channel.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tessera/v1/mesh.grpc.pb.h"

namespace tessera::client {

inline Placement Shard(int dim) { return Placement::Shard(dim); }
inline Placement Replicate() { return Placement::Replicate(); }
inline Placement Partial(ReduceOp op = ReduceOp::kSum) { return Placement::Partial(op); }

// Called with (bytes done, bytes in all) as a transfer proceeds.
using Progress = std::function<void(int64_t, int64_t)>;

struct SessionOptions {
  std::string client_id;   // Empty: a random id.
  bool keep_alive = true;  // Hold a lease (tensors reclaimed after the grace period once the
                           // process is gone); false: tensors stay until freed (the CLI).
  absl::Duration timeout = absl::Seconds(60);  // Deadline of a plain call.
};

// A connection to tessera-coordinator as one client. Thread-safe.
class Session : public std::enable_shared_from_this<Session> {
 public:
  static absl::StatusOr<std::shared_ptr<Session>> Connect(const std::string& address,
                                                          SessionOptions options = {});
  ~Session();

  const std::string& client_id() const { return options_.client_id; }
  v1::DTensorService::Stub& stub() { return *stub_; }
  v1::MeshService::Stub& meshes() { return *meshes_; }
  // Sets the deadline (`timeout`, or the session's) and the client id on a call.
  void Prepare(grpc::ClientContext* context, absl::Duration timeout = absl::ZeroDuration()) const;

 private:
  Session(const std::shared_ptr<grpc::Channel>& channel, SessionOptions options);
  std::unique_ptr<v1::DTensorService::Stub> stub_;
  std::unique_ptr<v1::MeshService::Stub> meshes_;
  SessionOptions options_;
  absl::Notification stop_;
  std::thread keeper_;
};

// A mesh on the service, as torch's DeviceMesh.
struct Mesh {
  std::string name;
  DeviceMesh mesh;
};

// init_device_mesh(device_type, shape, mesh_dim_names) as mesh `name`.
absl::StatusOr<Mesh> InitDeviceMesh(Session& session, const std::string& device_type,
                                    const Shape& shape, const std::vector<std::string>& dim_names,
                                    const std::string& name);
// An existing mesh by name.
absl::StatusOr<Mesh> GetMesh(Session& session, const std::string& name);

// A handle to a DTensor held by the service. Copies share it; the remote tensor is freed when the
// last copy goes (unless Detach()ed).
class DTensor {
 public:
  DTensor() = default;

  const std::string& name() const { return state_->info.name(); }
  const v1::TensorInfo& info() const { return state_->info; }
  const DTensorSpec& spec() const { return state_->spec; }
  const std::vector<Placement>& placements() const { return state_->spec.placements; }
  // Implicit redistributions the op that made this tensor ran (empty for other tensors).
  const std::vector<v1::InputRedistribution>& redistributions() const {
    return state_->redistributions;
  }
  // The plan the redistribute that made this tensor ran.
  const v1::RedistributePlan& plan() const { return state_->plan; }

  // DTensor.redistribute(placements): same mesh, or `mesh` for a move to another mesh.
  absl::StatusOr<DTensor> Redistribute(const std::vector<Placement>& placements,
                                       const std::string& mesh = "",
                                       const std::string& output = "") const;
  // The plan Redistribute would run, without running it.
  absl::StatusOr<v1::RedistributePlan> ExplainRedistribute(
      const std::vector<Placement>& placements) const;
  absl::StatusOr<HostTensor> FullTensor(const Progress& progress = nullptr) const;
  absl::StatusOr<HostTensor> ToLocal(int64_t rank) const;
  // Waits until the workers have written it (at most `timeout`, by default the session's);
  // reports their error if they failed.
  absl::Status Synchronize(absl::Duration timeout = absl::ZeroDuration()) const;
  // Fresh metadata (state, error).
  absl::StatusOr<v1::TensorInfo> Refresh() const;
  // Keeps the remote tensor when the handles go.
  void Detach() { state_->owned = false; }
  // Frees the remote tensor now.
  absl::Status Free();

  // Wraps a reply (internal to the client library); the error of a malformed spec in `info`.
  static absl::StatusOr<DTensor> Adopt(std::shared_ptr<Session> session, const v1::TensorInfo& info,
                                       bool owned);

 private:
  struct State {
    State(std::shared_ptr<Session> s, v1::TensorInfo i, DTensorSpec sp, bool o)
        : session(std::move(s)), info(std::move(i)), spec(std::move(sp)), owned(o) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State();
    std::shared_ptr<Session> session;
    v1::TensorInfo info;
    DTensorSpec spec;
    bool owned = true;
    std::vector<v1::InputRedistribution> redistributions;
    v1::RedistributePlan plan;
  };
  std::shared_ptr<State> state_;
  friend absl::StatusOr<DTensor> RunOp(const OpCall&, absl::Span<const DTensor>,
                                       const std::string&);
};

struct DistributeOptions {
  int64_t src_data_rank = 0;
  std::string name;
  Progress progress;
};
// distribute_tensor(tensor, mesh, placements, src_data_rank).
absl::StatusOr<DTensor> DistributeTensor(Session& session, const HostTensor& tensor,
                                         const Mesh& mesh, const std::vector<Placement>& placements,
                                         const DistributeOptions& options = {});

struct FromLocalOptions {
  bool run_check = false;
  std::optional<Shape> shape;  // The global shape; needed when shards are uneven.
  std::string name;
};
// DTensor.from_local: `locals[r]` is rank r's shard (row-major mesh position).
absl::StatusOr<DTensor> FromLocal(Session& session, absl::Span<const HostTensor> locals,
                                  const Mesh& mesh, const std::vector<Placement>& placements,
                                  const FromLocalOptions& options = {});

// zeros, ones, full, empty, rand, randn on a mesh.
absl::StatusOr<DTensor> CreateTensor(Session& session, v1::Factory factory, const Mesh& mesh,
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

#endif  // TESSERA_CLIENT_DTENSOR_H_

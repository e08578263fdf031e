#ifndef TESSERA_INCLUDE_TESSERA_SESSION_H_
#define TESSERA_INCLUDE_TESSERA_SESSION_H_

// A connection to tessera-coordinator as one client: the calls on workers, meshes, local tensors
// and collectives, and the listing of DTensors. The handles with PyTorch's names are made by free
// functions over a Session (mesh.h, dtensor.h).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/host_tensor.h"
#include "tessera/collectives.h"
#include "tessera/dtensor.h"
#include "tessera/mesh.h"
#include "tessera/ops.h"

namespace tessera::client {

// How a session connects. As with every options struct here, each member has a default, so
// designated initializers may name any of them.
// Whether the bytes of DistributeTensor, FromLocal, FullTensor and ToLocal go between the client
// and the workers directly (each block to or from its worker, under a grant of the coordinator's,
// which still sets the order) or through the coordinator. kAuto goes direct when the workers
// answer within a second or two, else relays; kOn fails where the direct path fails.
enum class DirectData { kAuto, kOn, kOff };

struct SessionOptions {
  std::string client_id = {};  // Empty: a random id.
  bool keep_alive = true;      // Hold a lease (tensors reclaimed after the grace period once the
                               // process is gone); false: tensors stay until freed (the CLI).
  absl::Duration timeout = absl::Seconds(60);  // Connecting, and the deadline of a plain call.
  // Ops and frees go on one ordered stream and return without waiting for the coordinator: an op's
  // output is a handle at once (its metadata computed here, by the planner the coordinator runs),
  // and a failure the client could not foresee shows on the output (Synchronize, FullTensor, ...).
  // false: one unary call each, returning once the coordinator accepted it.
  bool op_stream = true;
  // TLS (all empty: plaintext): the CA that signs the coordinator's certificate (empty: the
  // system's roots), and this client's certificate and key, for a coordinator that requires them
  // (mutual TLS). PEM files.
  std::string tls_ca_file = {};
  std::string tls_cert_file = {};
  std::string tls_key_file = {};
  // A bearer token, sent as "authorization: Bearer <token>" on every call, for a coordinator
  // started with --tokens_file (which needs TLS); empty sends none.
  std::string token = {};
  // The bulk bytes' path (DirectData); workers are reached with the TLS files above.
  DirectData direct_data = DirectData::kAuto;
};

namespace internal {
struct SessionImpl;
}  // namespace internal

// A connection to tessera-coordinator. Every call has a deadline and returns the service's status
// code and message. Thread-safe. Always held by a shared_ptr (handles keep their session alive).
class Session : public std::enable_shared_from_this<Session> {
 public:
  // Connects to `address` (host:port), waiting up to options.timeout for the channel to be ready.
  static absl::StatusOr<std::shared_ptr<Session>> Connect(const std::string& address,
                                                          SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& address() const;
  const std::string& client_id() const;

  // Workers and meshes.
  absl::StatusOr<std::vector<WorkerInfo>> ListWorkers();
  absl::StatusOr<std::vector<MeshInfo>> ListMeshes();
  // Deletes a mesh, its communicators and its tensors.
  absl::Status DeleteMesh(const std::string& name);

  // Uploads `tensor` as rank `rank`'s local tensor `name` on `mesh` (rank: row-major position).
  absl::Status PutLocal(const std::string& mesh, int64_t rank, const std::string& name,
                        const HostTensor& tensor);
  // Downloads rank `rank`'s local tensor `name`.
  absl::StatusOr<HostTensor> GetLocal(const std::string& mesh, int64_t rank,
                                      const std::string& name);
  // Frees local tensor `name` on every rank of `mesh`.
  absl::Status DeleteLocal(const std::string& mesh, const std::string& name);

  // Runs a collective and returns once every rank has run it (async_op=False).
  absl::StatusOr<CollectiveResult> RunCollective(const CollectiveRequest& request);
  // Starts a collective and returns once it is queued on the workers (async_op=True).
  absl::StatusOr<Work> StartCollective(const CollectiveRequest& request);
  // Waits for started collectives of `mesh` (each may be waited on once): one outcome per work, in
  // order. The call itself fails, and forgets nothing, on an unknown id or when one is still
  // running after `timeout`.
  absl::StatusOr<std::vector<absl::StatusOr<CollectiveResult>>> WaitCollectives(
      const std::string& mesh, absl::Span<const int64_t> works,
      absl::Duration timeout = absl::InfiniteDuration());
  // Opens an ordered stream of collectives, alive for at most `timeout`.
  absl::StatusOr<std::unique_ptr<CollectiveStream>> OpenCollectiveStream(
      absl::Duration timeout = absl::Minutes(10));

  // Every DTensor, or those on `mesh`.
  absl::StatusOr<std::vector<DTensorInfo>> ListTensors(const std::string& mesh = "");
  // The coordinator's op registry (what Call runs), or its ops whose name contains `filter`,
  // sorted by name.
  absl::StatusOr<std::vector<OpInfo>> ListOps(const std::string& filter = "");

 private:
  friend internal::SessionImpl& internal_impl(Session& session);
  explicit Session(std::unique_ptr<internal::SessionImpl> impl);

  std::unique_ptr<internal::SessionImpl> impl_;
};

}  // namespace tessera::client

#endif  // TESSERA_INCLUDE_TESSERA_SESSION_H_

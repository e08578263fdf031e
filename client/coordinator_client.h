#ifndef TESSERA_CLIENT_COORDINATOR_CLIENT_H_
#define TESSERA_CLIENT_COORDINATOR_CLIENT_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/host_tensor.h"
#include "core/shape.h"
#include "grpcpp/channel.h"
#include "tessera/v1/collective.grpc.pb.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tessera/v1/mesh.grpc.pb.h"

namespace tessera {

// An ordered stream of collectives on one connection (the CollectiveStream RPC): Submit sends a
// collective and returns at once, with no round trip; Next reports outcomes in submission order,
// each once its collective has finished. One thread may Submit while another calls Next. At most
// kMaxUnread outcomes may be left unread: past that, Submit refuses until Next catches up (the
// service stops reading a stream whose outcomes are not read). The stream lives until the
// timeout given when it was opened.
class CollectiveStream {
 public:
  static constexpr int64_t kMaxUnread = 1024;

  // Closes the sending side and waits for the outcomes not read yet (their collectives run to
  // the end either way).
  ~CollectiveStream();

  // Sends `request` (async_op is implied). FAILED_PRECONDITION with kMaxUnread outcomes unread;
  // UNAVAILABLE when the stream itself has broken (Next then says why).
  absl::Status Submit(const v1::CollectiveRequest& request);
  // The outcome of the oldest submitted collective not reported yet, waiting for it.
  absl::StatusOr<v1::CollectiveReply> Next();
  // Submitted collectives whose outcome Next has not returned yet.
  int64_t outstanding() const { return submitted_ - reported_; }

 private:
  friend class CoordinatorClient;
  CollectiveStream() = default;
  // Ends the stream once (gRPC allows one Finish) and returns why it ended.
  absl::Status End();

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResult>> stream_;
  std::atomic<int64_t> submitted_{0};
  std::atomic<int64_t> reported_{0};
  std::atomic<bool> closed_{false};  // no more writes
  absl::Mutex end_mu_;
  bool ended_ ABSL_GUARDED_BY(end_mu_) = false;  // Finish was called
  absl::Status end_status_ ABSL_GUARDED_BY(end_mu_);
};

// A connection to tessera-coordinator. Every call has a deadline (the client's timeout unless
// given) and returns the service's status code and message. Thread-safe.
class CoordinatorClient {
 public:
  // Connects to `address` (host:port), waiting up to `timeout` for the channel to be ready.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const std::string& address, absl::Duration timeout = absl::Seconds(60));

  absl::StatusOr<std::vector<v1::WorkerInfo>> ListWorkers();
  // init_device_mesh on the service.
  absl::StatusOr<v1::MeshInfo> CreateMesh(const std::string& name, const std::string& device_type,
                                          const Shape& shape,
                                          const std::vector<std::string>& dim_names = {},
                                          const std::vector<int64_t>& worker_ids = {},
                                          absl::Duration collective_timeout = absl::Seconds(30));
  absl::StatusOr<v1::MeshInfo> GetMesh(const std::string& name);
  absl::StatusOr<std::vector<v1::MeshInfo>> ListMeshes();
  absl::Status DeleteMesh(const std::string& name);

  // Uploads `tensor` as rank `rank`'s local tensor `name` on `mesh`, in chunks of 1 MiB.
  absl::Status PutLocal(const std::string& mesh, int64_t rank, const std::string& name,
                        const HostTensor& tensor);
  // Downloads rank `rank`'s local tensor `name`.
  absl::StatusOr<HostTensor> GetLocal(const std::string& mesh, int64_t rank,
                                      const std::string& name);
  // Runs a collective on a tensor along a mesh dim (as torch.distributed on a mesh group). With
  // request.async_op() it returns once the collective is queued, its reply holding only the work
  // id for WaitCollectives.
  absl::StatusOr<v1::CollectiveReply> RunCollective(const v1::CollectiveRequest& request);
  // Waits for collectives started with async_op on `mesh` (each may be waited on once): one
  // outcome per work, in order. The call itself fails, and forgets nothing, on an unknown id or
  // when one is still running after `timeout`.
  absl::StatusOr<std::vector<absl::StatusOr<v1::CollectiveReply>>> WaitCollectives(
      const std::string& mesh, const std::vector<int64_t>& works,
      absl::Duration timeout = absl::InfiniteDuration());
  // Opens an ordered stream of collectives, alive for at most `timeout`.
  absl::StatusOr<std::unique_ptr<CollectiveStream>> OpenCollectiveStream(
      absl::Duration timeout = absl::Minutes(10));
  absl::Status DeleteTensor(const std::string& mesh, const std::string& name);
  // Every DTensor (client/dtensor.h works with them).
  absl::StatusOr<std::vector<v1::TensorInfo>> ListTensors();

  const std::string& address() const { return address_; }

 private:
  CoordinatorClient(std::string address, const std::shared_ptr<grpc::Channel>& channel,
                    absl::Duration timeout)
      : address_(std::move(address)),
        meshes_(v1::MeshService::NewStub(channel)),
        collectives_(v1::CollectiveService::NewStub(channel)),
        dtensors_(v1::DTensorService::NewStub(channel)),
        timeout_(timeout) {}
  void Prepare(grpc::ClientContext* context, absl::Duration timeout) const;

  const std::string address_;
  std::unique_ptr<v1::MeshService::Stub> meshes_;
  std::unique_ptr<v1::CollectiveService::Stub> collectives_;
  std::unique_ptr<v1::DTensorService::Stub> dtensors_;
  const absl::Duration timeout_;
};

}  // namespace tessera

#endif  // TESSERA_CLIENT_COORDINATOR_CLIENT_H_

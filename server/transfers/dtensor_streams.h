#ifndef TESSERA_SERVER_TRANSFERS_DTENSOR_STREAMS_H_
#define TESSERA_SERVER_TRANSFERS_DTENSOR_STREAMS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/sharding/dtensor_spec.h"
#include "grpcpp/grpcpp.h"
#include "security/idle_streams.h"
#include "server/tables/dtensor_table.h"
#include "tessera/v1/tensor.pb.h"

namespace tessera {

// DTensor bytes in and out of the workers: distribute_tensor and from_local in, to_local and
// full_tensor out, and moves across meshes. Bytes pass through as bounded windows (the shard
// streams); replicas are made by the workers' broadcasts, never by sending the bytes twice. Each
// call returns what its RPC replies; the caller's client id is `owner`.
class DTensorStreams {
 public:
  // An upload whose client sends nothing for `idle_timeout` is ended (IdleStreams; by default
  // none is).
  explicit DTensorStreams(DTensorTable* tensors, absl::Duration idle_timeout = absl::ZeroDuration())
      : tensors_(tensors), idle_(idle_timeout) {}

  absl::StatusOr<v1::TensorInfo> Distribute(grpc::ServerContext& context,
                                            grpc::ServerReader<v1::DistributeChunk>* reader,
                                            const std::string& owner);
  absl::StatusOr<v1::TensorInfo> FromLocal(grpc::ServerContext& context,
                                           grpc::ServerReader<v1::FromLocalChunk>* reader,
                                           const std::string& owner);
  absl::Status ToLocal(const grpc::ServerContext& context, const v1::ToLocalRequest& request,
                       grpc::ServerWriter<v1::TensorData>* writer);
  absl::Status FullTensor(const grpc::ServerContext& context, const v1::FullTensorRequest& request,
                          grpc::ServerWriter<v1::TensorData>* writer);
  // Streams `src` out of its mesh into `dst_mesh` with `placements` as `output` (synchronous);
  // fills the reply's output and relayed bytes.
  absl::Status MoveAcrossMeshes(const grpc::ServerContext& context, const DTensorEntry& src,
                                std::shared_ptr<Mesh> dst_mesh, std::vector<Placement> placements,
                                const std::string& output, const std::string& owner,
                                v1::RedistributeReply* reply);

  // full_tensor() of `tensor` to `write`, window by window, until `deadline` (Partial values are
  // reduced by the workers first); CANCELLED when `write` fails. OK only once the tensor's record
  // is durable: what a client has read is not lost with the coordinator.
  absl::Status ReadFull(const DTensorEntry& tensor, absl::Time deadline,
                        absl::FunctionRef<bool(std::string)> write);
  // Completes a tensor whose blocks were uploaded to the ranks at coordinate `source` on every
  // non-Shard mesh dim: posts the SpreadTensor that broadcasts them along `broadcast_dims` (and,
  // with `partition`, gives Partial dims distribute_tensor's layout), or completes the tensor's
  // write if nothing is to spread; NOT_FOUND if the tensor was freed during its upload.
  absl::Status Spread(const DTensorEntry& tensor, const std::vector<int64_t>& source,
                      const std::vector<int>& broadcast_dims, bool partition);

  // Where a tensor's values can be read from: its own shards, or (with Partial placements) a
  // temporary the workers reduce them into first (posted now, so ordered before later reads).
  struct Readable {
    DTensorSpec spec;
    std::string worker_tensor;
    bool temporary = false;
  };
  absl::StatusOr<Readable> ReadableLayout(const DTensorEntry& tensor);
  // Posts the deletion of the temporary, if any: ordered after every read reserved before it.
  void DropReadable(const DTensorEntry& tensor, const Readable& readable);

  // The global shape of a from_local tensor: the one given, or inferred as DTensor does (every
  // rank's shard as large as the first one's).
  static absl::StatusOr<Shape> FromLocalShape(const DeviceMesh& mesh, const v1::FromLocalHeader& h,
                                              const std::vector<Placement>& placements,
                                              const Shape& first_local);

 private:
  // Why reading `tensor` failed: its write's error if that failed, else `download`, as
  // DTensorTable::Explain answers it.
  absl::Status ReadFailure(const DTensorEntry& tensor, absl::Status download) const;
  // Receives one rank's section of a from_local stream, starting at `chunk` (its header chunk),
  // into its worker; leaves the next rank's header chunk in `chunk`, or sets `more` to false.
  absl::Status ReceiveRank(const grpc::ServerContext& context, const DTensorEntry& tensor,
                           grpc::ServerReader<v1::FromLocalChunk>* reader,
                           IdleStreams::Watch& watch, bool has_shape, std::vector<bool>& seen,
                           v1::FromLocalChunk& chunk, bool& more);

  DTensorTable* tensors_;
  IdleStreams idle_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TRANSFERS_DTENSOR_STREAMS_H_

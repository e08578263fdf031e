#include "client/direct_distribute.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/sharding/block_runs.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "transfer/tensor_stream.h"

namespace tessera::client {

bool RelayMayHelp(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kUnimplemented ||
         code == absl::StatusCode::kPermissionDenied || code == absl::StatusCode::kUnauthenticated;
}

namespace {

// Drops the plan on the coordinator: its sequences are released, nothing is kept.
void Abort(const internal::SessionImpl& impl, const std::string& upload_id) {
  grpc::ClientContext context;
  impl.Prepare(&context);
  context.set_wait_for_ready(false);  // the plan lives only in the coordinator that made it
  v1::CommitUploadRequest request;
  request.set_upload_id(upload_id);
  request.set_abort(true);
  v1::TensorInfo ignored;
  impl.dtensors->CommitUpload(&context, request, &ignored).IgnoreError();  // else it expires
}

// One block's upload: its result and the worker's receipt.
struct BlockUpload {
  absl::Status status;
  std::string receipt;
};

// Streams the block `route` names out of the whole tensor `bytes` (shape `shape`) to its worker.
BlockUpload SendBlock(grpc::Channel& channel, const v1::UploadRoute& route, absl::string_view bytes,
                      const Shape& shape, size_t element_size,
                      absl::FunctionRef<void(int64_t)> sent) {
  const v1::DirectGrant& grant = route.grant();
  absl::StatusOr<Shape> local = FromProto(grant.shape());
  if (!local.ok() || local->size() != shape.size() ||
      route.offset_size() != static_cast<int>(shape.size())) {
    return {absl::InternalError("the coordinator's route does not fit the tensor"), ""};
  }
  const std::vector<int64_t> offset(route.offset().begin(), route.offset().end());
  const BlockRuns runs(shape, offset, *local);
  std::unique_ptr<v1::Worker::Stub> stub =
      v1::Worker::NewStub(std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kTransferTimeout));
  // The worker checks the grant before it reads the stream.
  context.AddMetadata(kGrantMetadataKey, grant.SerializeAsString());
  v1::UploadReply reply;
  std::unique_ptr<grpc::ClientWriter<v1::TensorChunk>> writer = stub->Upload(&context, &reply);
  v1::TensorChunk chunk;
  chunk.set_tensor(grant.tensor());
  chunk.set_dtype(grant.dtype());
  *chunk.mutable_shape() = grant.shape();
  chunk.set_sequence(grant.sequence());
  chunk.set_incarnation(grant.incarnation());
  // The header goes with the first chunk even for a block of no bytes.
  ChunkWriter chunks([&](std::string piece) {
    const int64_t n = static_cast<int64_t>(piece.size());
    chunk.set_data(std::move(piece));
    const bool open = writer->Write(chunk);
    chunk.Clear();
    sent(n);
    return open;
  });
  const int64_t run_bytes = runs.run_length() * static_cast<int64_t>(element_size);
  bool open = true;
  for (int64_t i = 0; open && i < runs.num_runs(); ++i) {
    open = chunks.Append(bytes.substr(static_cast<size_t>(runs.RunStart(i)) * element_size,
                                      static_cast<size_t>(run_bytes)));
  }
  if (open) chunks.Finish();
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  if (!s.ok()) {
    return {WithContext(absl::StrCat("direct upload to worker ", grant.worker_id(), " at ",
                                     route.address()),
                        FromGrpcStatus(s)),
            ""};
  }
  return {absl::OkStatus(), reply.receipt()};
}

// Asks the coordinator for the plan of `request`; `may_relay` when it offers no direct path.
absl::StatusOr<v1::UploadPlan> RequestPlan(const internal::SessionImpl& impl,
                                           const v1::PlanUploadRequest& request, bool& may_relay) {
  v1::UploadPlan plan;
  grpc::ClientContext context;
  impl.Prepare(&context);
  const grpc::Status s = impl.dtensors->PlanUpload(&context, request, &plan);
  if (!s.ok()) {
    may_relay = s.error_code() == grpc::StatusCode::UNIMPLEMENTED;
    return FromGrpcStatus(s);
  }
  return plan;
}

// A channel to each route's worker, in the order of `plan`'s routes; the plan is aborted, and
// `may_relay` set, when one cannot be reached within `reach_timeout`.
absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> ConnectRoutes(
    internal::SessionImpl& impl, const v1::UploadPlan& plan, absl::Duration reach_timeout,
    bool& may_relay) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const v1::UploadRoute& route : plan.routes()) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        impl.workers.Connected(route.address(), impl.credentials, reach_timeout);
    if (!channel.ok()) {
      Abort(impl, plan.upload_id());
      may_relay = true;
      return channel.status();
    }
    channels.push_back(*std::move(channel));
  }
  return channels;
}

// Sends each of `plan`'s blocks on its route's channel, at most kParallelBlocks at once, out of
// `sources` (route i's tensor is sources[route.position()] for `whole_locals`, else sources[0]).
std::vector<BlockUpload> SendBlocks(const v1::UploadPlan& plan,
                                    const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                                    absl::Span<const HostTensor> sources, bool whole_locals,
                                    const Progress& progress) {
  int64_t total_bytes = 0;
  for (const HostTensor& t : sources) total_bytes += static_cast<int64_t>(t.nbytes());
  std::vector<BlockUpload> results(static_cast<size_t>(plan.routes_size()));
  absl::Mutex progress_mu;
  int64_t sent_total = 0;
  const auto sent = [&](int64_t n) {
    if (!progress) return;
    absl::MutexLock lock(&progress_mu);
    sent_total += n;
    progress(sent_total, total_bytes);
  };
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < results.size(); i = next++) {
      const v1::UploadRoute& route = plan.routes(static_cast<int>(i));
      const size_t source = whole_locals ? static_cast<size_t>(route.position()) : 0;
      if (source >= sources.size()) {
        results[i] = {absl::InternalError("the coordinator's route names no local tensor"), ""};
        continue;
      }
      const HostTensor& tensor = sources[source];
      results[i] = SendBlock(*channels[i], route, AsBytes(tensor), tensor.shape(),
                             DTypeSize(tensor.dtype()), sent);
    }
  };
  std::vector<std::thread> threads;
  const size_t parallel = std::min(results.size(), static_cast<size_t>(kParallelBlocks));
  for (size_t t = 1; t < parallel; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  return results;
}

// Commits `plan` with its blocks' receipts; at the first failed block the plan is aborted instead
// (its worker marked unreachable when UNAVAILABLE) and `may_relay` says whether the relay may help.
absl::StatusOr<v1::TensorInfo> CommitBlocks(internal::SessionImpl& impl, const v1::UploadPlan& plan,
                                            const std::vector<BlockUpload>& results,
                                            bool& may_relay) {
  v1::CommitUploadRequest commit;
  commit.set_upload_id(plan.upload_id());
  for (size_t i = 0; i < results.size(); ++i) {
    const BlockUpload& r = results[i];
    if (!r.status.ok()) {
      if (absl::IsUnavailable(r.status)) {
        impl.workers.MarkUnreachable(plan.routes(static_cast<int>(i)).address());
      }
      Abort(impl, plan.upload_id());
      may_relay = RelayMayHelp(r.status.code());
      return r.status;
    }
    commit.add_receipts(r.receipt);
  }
  grpc::ClientContext context;
  impl.Prepare(&context);
  // The plan lives only in the coordinator process that made it: a restarted one would not know
  // it, so a commit fails at once (UNAVAILABLE) rather than waiting for the coordinator to return.
  context.set_wait_for_ready(false);
  v1::TensorInfo info;
  RETURN_IF_ERROR(FromGrpcStatus(impl.dtensors->CommitUpload(&context, commit, &info)));
  return info;
}

}  // namespace

absl::StatusOr<v1::TensorInfo> UploadDirect(internal::SessionImpl& impl,
                                            const v1::PlanUploadRequest& request,
                                            absl::Span<const HostTensor> sources,
                                            const Progress& progress, absl::Duration reach_timeout,
                                            bool& may_relay) {
  may_relay = false;
  ASSIGN_OR_RETURN(const v1::UploadPlan plan, RequestPlan(impl, request, may_relay));
  // The channels are held until the plan is committed or aborted.
  ASSIGN_OR_RETURN(const std::vector<std::shared_ptr<grpc::Channel>> channels,
                   ConnectRoutes(impl, plan, reach_timeout, may_relay));
  const std::vector<BlockUpload> results =
      SendBlocks(plan, channels, sources, request.has_from_local(), progress);
  return CommitBlocks(impl, plan, results, may_relay);
}

}  // namespace tessera::client

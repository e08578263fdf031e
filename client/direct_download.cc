#include "client/direct_download.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/direct_distribute.h"
#include "core/sharding/block_runs.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "tessera/v1/worker.grpc.pb.h"
#include "transfer/tensor_stream.h"

namespace tessera::client {
namespace {

// Reads the block `route` names from its worker into its place in `out` (row-major).
absl::Status ReceiveBlock(grpc::Channel& channel, const v1::UploadRoute& route, HostTensor& out,
                          absl::FunctionRef<void(int64_t)> received) {
  const v1::DirectGrant& grant = route.grant();
  const size_t element_size = DTypeSize(out.dtype());
  absl::StatusOr<Shape> local = FromProto(grant.shape());
  if (!local.ok() || local->size() != out.shape().size() ||
      route.offset_size() != static_cast<int>(out.shape().size())) {
    return absl::InternalError("the coordinator's route does not fit the tensor");
  }
  const std::vector<int64_t> offset(route.offset().begin(), route.offset().end());
  const BlockRuns runs(out.shape(), offset, *local);
  const int64_t run_bytes = runs.run_length() * static_cast<int64_t>(element_size);
  const int64_t want = NumElements(*local) * static_cast<int64_t>(element_size);
  std::unique_ptr<v1::Worker::Stub> stub =
      v1::Worker::NewStub(std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kTransferTimeout));
  v1::DownloadRequest request;
  request.set_tensor(grant.tensor());
  request.set_sequence(grant.sequence());
  request.set_incarnation(grant.incarnation());
  *request.mutable_grant() = grant;
  std::unique_ptr<grpc::ClientReader<v1::TensorChunk>> reader = stub->Download(&context, request);
  const auto where = [&] {
    return absl::StrCat("direct download from worker ", grant.worker_id(), " at ", route.address());
  };
  v1::TensorChunk chunk;
  int64_t got = 0;
  absl::Status status;
  char* base = reinterpret_cast<char*>(out.data());
  while (reader->Read(&chunk)) {
    absl::string_view piece = chunk.data();
    if (got + static_cast<int64_t>(piece.size()) > want) {
      status = absl::DataLossError(
          absl::StrCat(where(), ": more than the ", want, " bytes of its block"));
      context.TryCancel();
      break;
    }
    received(static_cast<int64_t>(piece.size()));
    while (!piece.empty()) {
      const int64_t run = got / run_bytes, within = got % run_bytes;
      const size_t take = std::min(piece.size(), static_cast<size_t>(run_bytes - within));
      std::memcpy(base + runs.RunStart(run) * static_cast<int64_t>(element_size) + within,
                  piece.data(), take);
      piece.remove_prefix(take);
      got += static_cast<int64_t>(take);
    }
  }
  const grpc::Status s = reader->Finish();
  if (!status.ok()) return status;
  if (!s.ok()) {
    return WithContext(where(), FromGrpcStatus(s));
  }
  if (got != want) {
    return absl::DataLossError(
        absl::StrCat(where(), ": ", got, " bytes of a block of ", want, " bytes"));
  }
  return absl::OkStatus();
}

// Gives the plan up on the coordinator: its reads not made are released at once.
void ReleasePlan(const internal::SessionImpl& impl, const std::string& download_id) {
  grpc::ClientContext context;
  impl.Prepare(&context);
  context.set_wait_for_ready(false);  // the plan lives only in the coordinator that made it
  v1::ReleaseDownloadRequest request;
  request.set_download_id(download_id);
  v1::ReleaseDownloadReply ignored;
  impl.dtensors->ReleaseDownload(&context, request, &ignored).IgnoreError();  // else they expire
}

}  // namespace

absl::StatusOr<HostTensor> DownloadDirect(internal::SessionImpl& impl,
                                          const v1::PlanDownloadRequest& request,
                                          const Progress& progress, absl::Duration reach_timeout,
                                          bool& may_relay) {
  may_relay = false;
  v1::DownloadPlan plan;
  {
    grpc::ClientContext context;
    impl.Prepare(&context);
    const grpc::Status s = impl.dtensors->PlanDownload(&context, request, &plan);
    if (!s.ok()) {
      may_relay = s.error_code() == grpc::StatusCode::UNIMPLEMENTED;
      return FromGrpcStatus(s);
    }
  }
  absl::StatusOr<DType> dtype = FromProto(plan.dtype());
  absl::StatusOr<Shape> shape = FromProto(plan.shape());
  absl::StatusOr<HostTensor> answer =
      dtype.ok() && shape.ok() ? HostTensor::Uninitialized(*dtype, *std::move(shape))
                               : absl::StatusOr<HostTensor>(
                                     absl::InternalError("the coordinator's plan names no tensor"));
  if (!answer.ok()) {
    ReleasePlan(impl, plan.download_id());
    return answer.status();
  }
  HostTensor& out = *answer;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const v1::UploadRoute& route : plan.routes()) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        impl.workers.Connected(route.address(), impl.credentials, reach_timeout);
    if (!channel.ok()) {
      ReleasePlan(impl, plan.download_id());
      may_relay = true;
      return channel.status();
    }
    channels.push_back(*std::move(channel));
  }

  std::vector<absl::Status> results(static_cast<size_t>(plan.routes_size()));
  absl::Mutex progress_mu;
  int64_t received_total = 0;
  const auto received = [&](int64_t n) {
    if (!progress) return;
    absl::MutexLock lock(&progress_mu);
    received_total += n;
    progress(received_total, static_cast<int64_t>(out.nbytes()));
  };
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < results.size(); i = next++) {
      results[i] = ReceiveBlock(*channels[i], plan.routes(static_cast<int>(i)), out, received);
    }
  };
  std::vector<std::thread> threads;
  const size_t parallel = std::min(results.size(), static_cast<size_t>(kParallelBlocks));
  for (size_t t = 1; t < parallel; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) continue;
    if (absl::IsUnavailable(results[i])) {
      impl.workers.MarkUnreachable(plan.routes(static_cast<int>(i)).address());
    }
    ReleasePlan(impl, plan.download_id());
    may_relay = RelayMayHelp(results[i].code());
    return results[i];
  }
  return answer;
}

}  // namespace tessera::client

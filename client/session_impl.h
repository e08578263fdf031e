#ifndef TESSERA_CLIENT_SESSION_IMPL_H_
#define TESSERA_CLIENT_SESSION_IMPL_H_

// What a Session holds behind its public header: one stub per service, the options and the lease
// keeper. Internal to the client library.

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/op_stream.h"
#include "client/worker_channels.h"
#include "core/ops/op_propagation.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "tessera/session.h"
#include "tessera/v1/collective.grpc.pb.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tessera/v1/mesh.grpc.pb.h"
#include "tessera/v1/module.grpc.pb.h"

namespace tessera::client {
namespace internal {

struct SessionImpl {
  SessionImpl(std::string address, const std::shared_ptr<grpc::Channel>& channel,
              SessionOptions options, std::string tensor_prefix)
      : address(std::move(address)),
        options(std::move(options)),
        tensor_prefix(std::move(tensor_prefix)),
        meshes(v1::MeshService::NewStub(channel)),
        collectives(v1::CollectiveService::NewStub(channel)),
        dtensors(v1::DTensorService::NewStub(channel)),
        modules(v1::ModuleService::NewStub(channel)),
        ops(dtensors.get(), [this](grpc::ClientContext* context, absl::Duration timeout) {
          Prepare(context, timeout);
        }) {}

  // Sets the deadline (`timeout`, or the session's) and the client id on a call.
  void Prepare(grpc::ClientContext* context, absl::Duration timeout = absl::ZeroDuration()) const;
  // A name for a tensor this session makes on the op stream, unique among its tensors (and, by
  // the random prefix, among sessions').
  std::string NextTensorName() { return absl::StrCat(tensor_prefix, next_tensor.fetch_add(1)); }

  const std::string address;
  const SessionOptions options;
  const std::string tensor_prefix;
  const std::unique_ptr<v1::MeshService::Stub> meshes;
  const std::unique_ptr<v1::CollectiveService::Stub> collectives;
  const std::unique_ptr<v1::DTensorService::Stub> dtensors;
  const std::unique_ptr<v1::ModuleService::Stub> modules;
  // The credentials of the coordinator's channel, for channels straight to workers; set by Connect.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  WorkerChannels workers;  // channels straight to workers (direct data)
  OpStream ops;            // ops and frees, in order (used when options.op_stream)
  // Plans of registry ops sent on the op stream, made as the coordinator makes them.
  tessera::ops::ShardingCache op_plans;
  std::atomic<uint64_t> next_tensor{1};
  absl::Notification stop;  // ends the lease keeper
  std::thread keeper;       // renews the lease while the session lives
};

}  // namespace internal

// The stubs and options behind `session`.
internal::SessionImpl& internal_impl(Session& session);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_SESSION_IMPL_H_

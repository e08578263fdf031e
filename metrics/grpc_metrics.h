#ifndef TESSERA_METRICS_GRPC_METRICS_H_
#define TESSERA_METRICS_GRPC_METRICS_H_

#include <memory>
#include <vector>

#include "grpcpp/support/server_interceptor.h"
#include "metrics/registry.h"

namespace tessera::metrics {

// The interceptors a grpc::ServerBuilder installs (builder.experimental().SetInterceptorCreators)
// to count every RPC into `registry`: tessera_rpc_server_started_total{service,method},
// tessera_rpc_server_handled_total{service,method,code} and the histogram
// tessera_rpc_server_handling_seconds{service,method} (from the call's start to its status; an
// RPC that ends without a status, cancelled, counts as CANCELLED). `registry` must outlive the
// server.
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
RpcMetricsInterceptors(Registry* registry);

}  // namespace tessera::metrics

#endif  // TESSERA_METRICS_GRPC_METRICS_H_

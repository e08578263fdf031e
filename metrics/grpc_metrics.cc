#include "metrics/grpc_metrics.h"

#include <array>
#include <atomic>
#include <chrono>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tessera::metrics {
namespace {

constexpr int kCodes = 17;  // grpc::StatusCode OK .. UNAUTHENTICATED

// The metrics of one method, found once per method.
class MethodMetrics {
 public:
  MethodMetrics(Registry* registry, const std::string& full_name) {
    // "/package.Service/Method"
    const size_t slash = full_name.rfind('/');
    const size_t begin = full_name.empty() || full_name[0] != '/' ? 0 : 1;
    service_ = slash == std::string::npos ? "" : full_name.substr(begin, slash - begin);
    method_ = slash == std::string::npos ? full_name : full_name.substr(slash + 1);
    started_ = &registry
                    ->AddCounter("tessera_rpc_server_started_total", "RPCs started on this server",
                                 {"service", "method"})
                    .With({service_, method_});
    handled_family_ = &registry->AddCounter("tessera_rpc_server_handled_total",
                                            "RPCs completed on this server, by status code",
                                            {"service", "method", "code"});
    seconds_ = &registry
                    ->AddHistogram("tessera_rpc_server_handling_seconds",
                                   "time from an RPC's start to its status", {"service", "method"},
                                   LatencyBounds())
                    .With({service_, method_});
  }

  void Started() { started_->Increment(); }

  void Handled(int code, double seconds) {
    if (code < 0 || code >= kCodes) code = static_cast<int>(grpc::StatusCode::UNKNOWN);
    Counter* counter = handled_[code].load(std::memory_order_acquire);
    if (counter == nullptr) {
      counter = &handled_family_->With(
          {service_, method_, absl::StatusCodeToString(static_cast<absl::StatusCode>(code))});
      handled_[code].store(counter, std::memory_order_release);
    }
    counter->Increment();
    seconds_->Observe(seconds);
  }

 private:
  std::string service_;
  std::string method_;
  Counter* started_;
  Family<Counter>* handled_family_;
  Histogram* seconds_;
  std::array<std::atomic<Counter*>, kCodes> handled_{};
};

// Times one RPC.
class RpcInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit RpcInterceptor(MethodMetrics* metrics)
      : metrics_(metrics), start_(std::chrono::steady_clock::now()) {
    metrics_->Started();
  }
  ~RpcInterceptor() override {
    if (!handled_) Finish(static_cast<int>(grpc::StatusCode::CANCELLED));
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (!handled_ && methods->QueryInterceptionHookPoint(
                         grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      Finish(static_cast<int>(methods->GetSendStatus().error_code()));
    }
    methods->Proceed();
  }

 private:
  void Finish(int code) {
    handled_ = true;
    metrics_->Handled(
        code, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

  MethodMetrics* const metrics_;
  const std::chrono::steady_clock::time_point start_;
  bool handled_ = false;
};

class RpcInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcInterceptorFactory(Registry* registry) : registry_(registry) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcInterceptor(Find(info->method()));
  }

 private:
  MethodMetrics* Find(const char* method) {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<MethodMetrics>& m = methods_[method == nullptr ? "" : method];
    if (m == nullptr)
      m = std::make_unique<MethodMetrics>(registry_, method == nullptr ? "" : method);
    return m.get();
  }

  Registry* const registry_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<MethodMetrics>> methods_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
RpcMetricsInterceptors(Registry* registry) {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<RpcInterceptorFactory>(registry));
  return creators;
}

}  // namespace tessera::metrics

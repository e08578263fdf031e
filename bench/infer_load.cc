#include "bench/infer_load.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A channel of its own (not shared with the other clients' through gRPC's subchannel pool).
std::unique_ptr<inference::GRPCInferenceService::Stub> NewStub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  return inference::GRPCInferenceService::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

inference::ModelInferRequest MakeRequest(const std::string& model, const HostTensor& input) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  inference::ModelInferRequest::InferInputTensor* in = request.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  for (int64_t size : input.shape()) in->add_shape(size);
  request.add_raw_input_contents(reinterpret_cast<const char*>(input.data()), input.nbytes());
  return request;
}

// One request and its checks.
absl::Status Infer(inference::GRPCInferenceService::Stub& stub,
                   const inference::ModelInferRequest& request, int64_t output_elements) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  inference::ModelInferResponse response;
  const grpc::Status s = stub.ModelInfer(&context, request, &response);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("ModelInfer: ", s.error_message()));
  }
  if (response.raw_output_contents_size() != 1 ||
      response.raw_output_contents(0).size() != static_cast<size_t>(output_elements) * 4) {
    return absl::DataLossError(absl::StrCat("ModelInfer replied ",
                                            response.raw_output_contents_size(),
                                            " raw outputs, not one of ", output_elements, " FP32"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<InferLoad> RunInferLoad(const std::string& address, const std::string& model,
                                       const HostTensor& input, int64_t output_elements,
                                       int clients, int warmup, absl::Duration duration) {
  const inference::ModelInferRequest request = MakeRequest(model, input);
  absl::Mutex mu;
  absl::Status first_error;
  InferLoad load;
  Clock::time_point start, last_reply;
  absl::Barrier* warmed = new absl::Barrier(clients + 1);  // deletes itself after the last Block
  absl::Notification go;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      std::unique_ptr<inference::GRPCInferenceService::Stub> stub = NewStub(address);
      absl::Status status;
      for (int i = 0; i < warmup && status.ok(); ++i)
        status = Infer(*stub, request, output_elements);
      if (warmed->Block()) delete warmed;
      go.WaitForNotification();
      std::vector<double> mine;
      Clock::time_point end = start;
      const Clock::time_point stop = start + absl::ToChronoNanoseconds(duration);
      while (status.ok() && Clock::now() < stop) {
        const Clock::time_point t0 = Clock::now();
        status = Infer(*stub, request, output_elements);
        end = Clock::now();
        if (status.ok())
          mine.push_back(std::chrono::duration<double, std::micro>(end - t0).count());
      }
      absl::MutexLock lock(&mu);
      if (!status.ok() && first_error.ok()) first_error = status;
      load.latency_us.insert(load.latency_us.end(), mine.begin(), mine.end());
      last_reply = std::max(last_reply, end);
    });
  }
  if (warmed->Block()) delete warmed;
  start = Clock::now();
  last_reply = start;
  go.Notify();
  for (std::thread& t : threads) t.join();
  if (!first_error.ok()) return first_error;
  load.requests = static_cast<int64_t>(load.latency_us.size());
  load.seconds = std::chrono::duration<double>(last_reply - start).count();
  return load;
}

}  // namespace tessera::bench

// A KServe v2 ModelInfer call the cluster tests make against a published module: one FP32 input
// named "input", its output's raw bytes back.
#ifndef TESSERA_TESTS_KSERVE_INFER_H_
#define TESSERA_TESTS_KSERVE_INFER_H_

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/host_tensor.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

namespace tessera::testing {

// What `kserve` answered for `x` (float32) on `model`: its one raw output; the call's status, or
// INTERNAL for a reply without exactly one raw output.
inline absl::StatusOr<std::string> InferRaw(inference::GRPCInferenceService::Stub& kserve,
                                            const std::string& model, const HostTensor& x) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  for (int64_t d : x.shape()) input->add_shape(d);
  request.add_raw_input_contents(reinterpret_cast<const char*>(x.data()), x.nbytes());
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const grpc::Status s = kserve.ModelInfer(&context, request, &response);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  }
  if (response.raw_output_contents_size() != 1) {
    return absl::InternalError(
        absl::StrCat(response.raw_output_contents_size(), " raw outputs; want 1"));
  }
  return response.raw_output_contents(0);
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_KSERVE_INFER_H_

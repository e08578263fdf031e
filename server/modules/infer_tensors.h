#ifndef TESSERA_SERVER_MODULES_INFER_TENSORS_H_
#define TESSERA_SERVER_MODULES_INFER_TENSORS_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "inference/grpc_predict_v2.pb.h"
#include "server/tables/served_models.h"

namespace tessera {

// KServe's datatype string of `dtype`: "FP32", "FP64", "FP16", "BF16", "INT8", "UINT8", "INT32",
// "INT64", "BOOL".
absl::string_view KServeDatatype(DType dtype);

// The dtype of a KServe datatype string. INVALID_ARGUMENT naming it when it is no datatype, or one
// Tessera has no dtype for (INT16, UINT16, UINT32, UINT64, BYTES).
absl::StatusOr<DType> DTypeOfKServeDatatype(absl::string_view datatype);

// The request's one input as a tensor of the model's input dtype. INVALID_ARGUMENT, naming what is
// wrong, unless the request has exactly one input, named as the model's; its datatype is the
// model's dtype, or any floating datatype for a floating model (converted, rounding to nearest
// even); its shape has the model's rank and sizes wherever the model's are not -1; and its data
// is either its raw_input_contents entry of exactly shape x datatype size bytes, or its typed
// contents (fp32_contents, int64_contents, ...) with one value per element, never both.
absl::StatusOr<HostTensor> ReadModelInput(const inference::ModelInferRequest& request,
                                          const ServedModel& model);

// INVALID_ARGUMENT naming the first output the request asks for that the model does not have.
absl::Status CheckRequestedOutputs(const inference::ModelInferRequest& request,
                                   const ServedModel& model);

// Appends `output` to the response as the model's output: name, datatype, shape and its bytes as
// a raw_output_contents entry.
void AppendModelOutput(const ServedModel& model, const HostTensor& output,
                       inference::ModelInferResponse* response);

}  // namespace tessera

#endif  // TESSERA_SERVER_MODULES_INFER_TENSORS_H_

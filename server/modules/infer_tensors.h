#ifndef TESSERA_SERVER_MODULES_INFER_TENSORS_H_
#define TESSERA_SERVER_MODULES_INFER_TENSORS_H_

#include <vector>

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

// The request's inputs as tensors of the model's inputs' dtypes, in the model's order (the
// request may name them in any). INVALID_ARGUMENT, naming what is wrong, unless the request has
// exactly the model's inputs by name, each once; each input's datatype is the model's dtype for
// it, or any floating datatype for a floating one (converted, rounding to nearest even); its shape
// has the model's rank and sizes wherever the model's are not -1; and its data is either its
// raw_input_contents entry (one per input, in the request's order, when any is given) of exactly
// shape x datatype size bytes, or its typed contents (fp32_contents, int64_contents, ...) with one
// value per element, never both.
absl::StatusOr<std::vector<HostTensor>> ReadModelInputs(const inference::ModelInferRequest& request,
                                                        const ServedModel& model);

// The outputs the request asks for, as indices into the model's outputs in the request's order
// (every output, in order, when it asks for none); INVALID_ARGUMENT naming the first it asks for
// that the model does not have.
absl::StatusOr<std::vector<int>> RequestedOutputs(const inference::ModelInferRequest& request,
                                                  const ServedModel& model);

// Appends output `index` of the model, `output`, to the response: name, datatype, shape and its
// bytes as a raw_output_contents entry.
void AppendModelOutput(const ServedModel& model, int index, const HostTensor& output,
                       inference::ModelInferResponse* response);

}  // namespace tessera

#endif  // TESSERA_SERVER_MODULES_INFER_TENSORS_H_

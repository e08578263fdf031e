#include "server/modules/infer_tensors.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/tensor_view.h"

namespace tessera {
namespace {

// KServe's datatype strings for Tessera's dtypes.
struct DatatypeName {
  DType dtype;
  absl::string_view name;
};
constexpr DatatypeName kDatatypeNames[] = {
    {DType::kFloat32, "FP32"},  {DType::kFloat64, "FP64"}, {DType::kFloat16, "FP16"},
    {DType::kBFloat16, "BF16"}, {DType::kInt8, "INT8"},    {DType::kUInt8, "UINT8"},
    {DType::kInt32, "INT32"},   {DType::kInt64, "INT64"},  {DType::kBool, "BOOL"}};

// KServe's datatypes that Tessera has no dtype for.
constexpr absl::string_view kDatatypesWithoutDType[] = {"INT16", "UINT16", "UINT32", "UINT64",
                                                        "BYTES"};

// "input 'x' of model 'mlp' version 1", for messages.
std::string InputOf(const ServedModel& model) {
  return absl::StrCat("input '", model.input.name, "' of model '", model.name, "' version ",
                      model.version);
}

// The datatypes a model's input takes, for messages.
std::string Accepted(DType model_dtype) {
  if (!IsFloatingPoint(model_dtype)) return std::string(KServeDatatype(model_dtype));
  return absl::StrCat(KServeDatatype(model_dtype), " (or FP32, FP64, FP16, BF16, converted)");
}

// OK when a request of `datatype` can feed a model input of `model_dtype`: the same dtype, or
// both floating.
bool Takes(DType model_dtype, DType datatype) {
  return datatype == model_dtype || (IsFloatingPoint(datatype) && IsFloatingPoint(model_dtype));
}

// OK when `shape` fits the model's `expected`: same rank, same size wherever expected is not -1.
absl::Status CheckShape(const Shape& shape, const ServedModel& model) {
  const Shape& expected = model.input.shape;
  bool fits = shape.size() == expected.size();
  for (size_t d = 0; fits && d < shape.size(); ++d) {
    fits = expected[d] == -1 || expected[d] == shape[d];
  }
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeToString(shape), " does not fit ",
                                                   InputOf(model), ", of shape ",
                                                   ShapeToString(expected), " (-1: any size)"));
  }
  return absl::OkStatus();
}

// A tensor of `dtype` and `shape` from a repeated contents field of one value per element, each
// of which must be exact in T.
template <typename T, typename Values>
absl::StatusOr<HostTensor> FromValues(DType dtype, const Shape& shape, const Values& values,
                                      absl::string_view field, const ServedModel& model) {
  using Value = typename Values::value_type;
  const int64_t n = NumElements(shape);
  if (values.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(InputOf(model), " has ", values.size(), " ",
                                                   field, " values; shape ", ShapeToString(shape),
                                                   " needs ", n));
  }
  ASSIGN_OR_RETURN(HostTensor tensor, HostTensor::Uninitialized(dtype, shape));
  T* out = tensor.data_as<T>();
  for (int i = 0; i < values.size(); ++i) {
    const Value v = values[i];
    if constexpr (!std::is_same_v<T, Value>) {
      if (static_cast<Value>(static_cast<T>(v)) != v) {
        return absl::InvalidArgumentError(absl::StrCat(field, " value ", v, " at position ", i,
                                                       " of ", InputOf(model), " is not a ",
                                                       KServeDatatype(dtype)));
      }
    }
    out[i] = static_cast<T>(v);
  }
  return tensor;
}

// The input from its typed contents, the field of `dtype`.
absl::StatusOr<HostTensor> FromContents(DType dtype, const Shape& shape,
                                        const inference::InferTensorContents& c,
                                        const ServedModel& model) {
  switch (dtype) {
    case DType::kFloat32:
      return FromValues<float>(dtype, shape, c.fp32_contents(), "fp32_contents", model);
    case DType::kFloat64:
      return FromValues<double>(dtype, shape, c.fp64_contents(), "fp64_contents", model);
    case DType::kInt8:
      return FromValues<int8_t>(dtype, shape, c.int_contents(), "int_contents", model);
    case DType::kInt32:
      return FromValues<int32_t>(dtype, shape, c.int_contents(), "int_contents", model);
    case DType::kInt64:
      return FromValues<int64_t>(dtype, shape, c.int64_contents(), "int64_contents", model);
    case DType::kUInt8:
      return FromValues<uint8_t>(dtype, shape, c.uint_contents(), "uint_contents", model);
    case DType::kBool:
      return FromValues<bool>(dtype, shape, c.bool_contents(), "bool_contents", model);
    case DType::kFloat16:
    case DType::kBFloat16:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(InputOf(model), " is ", KServeDatatype(dtype),
                                                 ", which has no typed contents: send it in "
                                                 "raw_input_contents"));
}

// `t` converted to `dtype` by the CPU kernels' Cast (to floating rounds to nearest even).
absl::StatusOr<HostTensor> Converted(const HostTensor& t, DType dtype) {
  ASSIGN_OR_RETURN(HostTensor out, HostTensor::Uninitialized(dtype, t.shape()));
  kernels::CpuBackend cpu;
  RETURN_IF_ERROR(cpu.Cast(kernels::ViewOf(t), kernels::ViewOf(out)));
  return out;
}

}  // namespace

absl::string_view KServeDatatype(DType dtype) {
  for (const DatatypeName& d : kDatatypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  return "UNKNOWN";
}

absl::StatusOr<DType> DTypeOfKServeDatatype(absl::string_view datatype) {
  for (const DatatypeName& d : kDatatypeNames) {
    if (d.name == datatype) return d.dtype;
  }
  for (absl::string_view name : kDatatypesWithoutDType) {
    if (name == datatype) {
      return absl::InvalidArgumentError(
          absl::StrCat("datatype ", datatype, " has no Tessera dtype to serve it"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown datatype '", datatype, "'"));
}

absl::StatusOr<HostTensor> ReadModelInput(const inference::ModelInferRequest& request,
                                          const ServedModel& model) {
  if (request.inputs_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("model '", model.name, "' takes one input ('",
                                                   model.input.name, "'); the request has ",
                                                   request.inputs_size()));
  }
  const inference::ModelInferRequest::InferInputTensor& input = request.inputs(0);
  if (input.name() != model.input.name) {
    return absl::InvalidArgumentError(absl::StrCat("model '", model.name, "' has no input '",
                                                   input.name(), "'; its input is '",
                                                   model.input.name, "'"));
  }
  absl::StatusOr<DType> datatype = DTypeOfKServeDatatype(input.datatype());
  if (!datatype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(InputOf(model), ": ", datatype.status().message()));
  }
  if (!Takes(model.input.dtype, *datatype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        InputOf(model), " takes ", Accepted(model.input.dtype), ", not ", input.datatype()));
  }
  const Shape shape(input.shape().begin(), input.shape().end());
  if (absl::Status s = ValidateShape(shape); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeToString(shape), " of ", InputOf(model), ": ", s.message()));
  }
  RETURN_IF_ERROR(CheckShape(shape, model));

  HostTensor tensor;
  if (request.raw_input_contents_size() > 0) {
    if (request.raw_input_contents_size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("the request has ", request.raw_input_contents_size(),
                       " raw_input_contents entries for its 1 input"));
    }
    if (input.has_contents()) {
      return absl::InvalidArgumentError(absl::StrCat(
          InputOf(model), " sets both contents and raw_input_contents; send one of them"));
    }
    const std::string& raw = request.raw_input_contents(0);
    // Its byte count must fit in int64 before it is compared.
    RETURN_IF_ERROR(ValidateTensorShape(*datatype, shape));
    const int64_t needed = NumElements(shape) * static_cast<int64_t>(DTypeSize(*datatype));
    if (static_cast<int64_t>(raw.size()) != needed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "raw_input_contents of ", InputOf(model), " hold ", raw.size(), " bytes; shape ",
          ShapeToString(shape), " of ", input.datatype(), " needs ", needed));
    }
    ASSIGN_OR_RETURN(
        tensor,
        HostTensor::FromBytes(*datatype, shape, std::as_bytes(std::span(raw.data(), raw.size()))));
  } else {
    ASSIGN_OR_RETURN(tensor, FromContents(*datatype, shape, input.contents(), model));
  }
  if (tensor.dtype() == model.input.dtype) return tensor;
  return Converted(tensor, model.input.dtype);
}

absl::Status CheckRequestedOutputs(const inference::ModelInferRequest& request,
                                   const ServedModel& model) {
  for (const auto& asked : request.outputs()) {
    if (asked.name() != model.output.name) {
      return absl::InvalidArgumentError(absl::StrCat("model '", model.name, "' has no output '",
                                                     asked.name(), "'; its output is '",
                                                     model.output.name, "'"));
    }
  }
  return absl::OkStatus();
}

void AppendModelOutput(const ServedModel& model, const HostTensor& output,
                       inference::ModelInferResponse* response) {
  inference::ModelInferResponse::InferOutputTensor* out = response->add_outputs();
  out->set_name(model.output.name);
  out->set_datatype(std::string(KServeDatatype(output.dtype())));
  for (int64_t size : output.shape()) out->add_shape(size);
  response->add_raw_output_contents(reinterpret_cast<const char*>(output.data()), output.nbytes());
}

}  // namespace tessera

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
std::string InputOf(const ServedModel& model, const ServedTensor& input) {
  return absl::StrCat("input '", input.name, "' of model '", model.name, "' version ",
                      model.version);
}

// "'input_ids', 'attention_mask'": the names of `tensors`, for messages.
std::string NamesOf(const std::vector<ServedTensor>& tensors) {
  std::string names;
  for (const ServedTensor& t : tensors) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", "'", t.name, "'");
  }
  return names;
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
absl::Status CheckShape(const Shape& shape, const ServedModel& model, const ServedTensor& input) {
  const Shape& expected = input.shape;
  bool fits = shape.size() == expected.size();
  for (size_t d = 0; fits && d < shape.size(); ++d) {
    fits = expected[d] == -1 || expected[d] == shape[d];
  }
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeToString(shape), " does not fit ",
                                                   InputOf(model, input), ", of shape ",
                                                   ShapeToString(expected), " (-1: any size)"));
  }
  return absl::OkStatus();
}

// A tensor of `dtype` and `shape` from a repeated contents field of one value per element, each
// of which must be exact in T.
template <typename T, typename Values>
absl::StatusOr<HostTensor> FromValues(DType dtype, const Shape& shape, const Values& values,
                                      absl::string_view field, const std::string& what) {
  using Value = typename Values::value_type;
  const int64_t n = NumElements(shape);
  if (values.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", values.size(), " ", field,
                                                   " values; shape ", ShapeToString(shape),
                                                   " needs ", n));
  }
  ASSIGN_OR_RETURN(HostTensor tensor, HostTensor::Uninitialized(dtype, shape));
  T* out = tensor.data_as<T>();
  for (int i = 0; i < values.size(); ++i) {
    const Value v = values[i];
    if constexpr (!std::is_same_v<T, Value>) {
      if (static_cast<Value>(static_cast<T>(v)) != v) {
        return absl::InvalidArgumentError(absl::StrCat(field, " value ", v, " at position ", i,
                                                       " of ", what, " is not a ",
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
                                        const std::string& what) {
  switch (dtype) {
    case DType::kFloat32:
      return FromValues<float>(dtype, shape, c.fp32_contents(), "fp32_contents", what);
    case DType::kFloat64:
      return FromValues<double>(dtype, shape, c.fp64_contents(), "fp64_contents", what);
    case DType::kInt8:
      return FromValues<int8_t>(dtype, shape, c.int_contents(), "int_contents", what);
    case DType::kInt32:
      return FromValues<int32_t>(dtype, shape, c.int_contents(), "int_contents", what);
    case DType::kInt64:
      return FromValues<int64_t>(dtype, shape, c.int64_contents(), "int64_contents", what);
    case DType::kUInt8:
      return FromValues<uint8_t>(dtype, shape, c.uint_contents(), "uint_contents", what);
    case DType::kBool:
      return FromValues<bool>(dtype, shape, c.bool_contents(), "bool_contents", what);
    case DType::kFloat16:
    case DType::kBFloat16:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(what, " is ", KServeDatatype(dtype),
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

namespace {

// Request input `k` as model input `input`'s tensor; `raw` its raw_input_contents entry, if any.
absl::StatusOr<HostTensor> ReadInput(const inference::ModelInferRequest::InferInputTensor& in,
                                     const std::string* raw, const ServedModel& model,
                                     const ServedTensor& input) {
  const std::string what = InputOf(model, input);
  absl::StatusOr<DType> datatype = DTypeOfKServeDatatype(in.datatype());
  if (!datatype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", datatype.status().message()));
  }
  if (!Takes(input.dtype, *datatype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " takes ", Accepted(input.dtype), ", not ", in.datatype()));
  }
  const Shape shape(in.shape().begin(), in.shape().end());
  if (absl::Status s = ValidateShape(shape); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeToString(shape), " of ", what, ": ", s.message()));
  }
  RETURN_IF_ERROR(CheckShape(shape, model, input));
  HostTensor tensor;
  if (raw != nullptr) {
    if (in.has_contents()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " sets both contents and raw_input_contents; send one of them"));
    }
    // Its byte count must fit in int64 before it is compared.
    RETURN_IF_ERROR(ValidateTensorShape(*datatype, shape));
    const int64_t needed = NumElements(shape) * static_cast<int64_t>(DTypeSize(*datatype));
    if (static_cast<int64_t>(raw->size()) != needed) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw_input_contents of ", what, " hold ", raw->size(), " bytes; shape ",
                       ShapeToString(shape), " of ", in.datatype(), " needs ", needed));
    }
    ASSIGN_OR_RETURN(tensor,
                     HostTensor::FromBytes(*datatype, shape,
                                           std::as_bytes(std::span(raw->data(), raw->size()))));
  } else {
    ASSIGN_OR_RETURN(tensor, FromContents(*datatype, shape, in.contents(), what));
  }
  if (tensor.dtype() == input.dtype) return tensor;
  return Converted(tensor, input.dtype);
}

}  // namespace

absl::StatusOr<std::vector<HostTensor>> ReadModelInputs(const inference::ModelInferRequest& request,
                                                        const ServedModel& model) {
  const size_t n = model.inputs.size();
  if (static_cast<size_t>(request.inputs_size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", model.name, "' takes ", n == 1 ? "one input" : absl::StrCat(n, " inputs"), " (",
        NamesOf(model.inputs), "); the request has ", request.inputs_size()));
  }
  if (request.raw_input_contents_size() > 0 &&
      request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request has ", request.raw_input_contents_size(),
                     " raw_input_contents entries for its ", request.inputs_size(), " input",
                     request.inputs_size() == 1 ? "" : "s"));
  }
  std::vector<int> at(n, -1);  // the request's index of each model input
  for (int k = 0; k < request.inputs_size(); ++k) {
    const std::string& name = request.inputs(k).name();
    size_t i = 0;
    while (i < n && model.inputs[i].name != name) ++i;
    if (i == n) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", model.name, "' has no input '", name, "'; its input",
                       n == 1 ? " is " : "s are ", NamesOf(model.inputs)));
    }
    if (at[i] >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the request gives input '", name, "' of model '", model.name, "' twice"));
    }
    at[i] = k;
  }
  std::vector<HostTensor> tensors;
  for (size_t i = 0; i < n; ++i) {
    const int k = at[i];
    const std::string* raw =
        request.raw_input_contents_size() > 0 ? &request.raw_input_contents(k) : nullptr;
    ASSIGN_OR_RETURN(HostTensor t, ReadInput(request.inputs(k), raw, model, model.inputs[i]));
    tensors.push_back(std::move(t));
  }
  return tensors;
}

absl::StatusOr<std::vector<int>> RequestedOutputs(const inference::ModelInferRequest& request,
                                                  const ServedModel& model) {
  std::vector<int> indices;
  for (const auto& asked : request.outputs()) {
    size_t o = 0;
    while (o < model.outputs.size() && model.outputs[o].name != asked.name()) ++o;
    if (o == model.outputs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", model.name, "' has no output '", asked.name(), "'; its output",
                       model.outputs.size() == 1 ? " is " : "s are ", NamesOf(model.outputs)));
    }
    indices.push_back(static_cast<int>(o));
  }
  if (indices.empty()) {
    for (size_t o = 0; o < model.outputs.size(); ++o) indices.push_back(static_cast<int>(o));
  }
  return indices;
}

void AppendModelOutput(const ServedModel& model, int index, const HostTensor& output,
                       inference::ModelInferResponse* response) {
  inference::ModelInferResponse::InferOutputTensor* out = response->add_outputs();
  out->set_name(model.outputs[index].name);
  out->set_datatype(std::string(KServeDatatype(output.dtype())));
  for (int64_t size : output.shape()) out->add_shape(size);
  response->add_raw_output_contents(reinterpret_cast<const char*>(output.data()), output.nbytes());
}

}  // namespace tessera

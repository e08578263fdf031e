#include "server/modules/infer_tensors.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;

TEST(InferTensorsTest, DatatypeNamesRoundTripForEveryDType) {
  for (DType dtype : kAllDTypes) {
    auto back = DTypeOfKServeDatatype(KServeDatatype(dtype));
    ASSERT_TRUE(back.ok()) << DTypeName(dtype) << ": " << back.status();
    EXPECT_EQ(*back, dtype) << KServeDatatype(dtype);
  }
  EXPECT_EQ(KServeDatatype(DType::kFloat32), "FP32");
  EXPECT_EQ(KServeDatatype(DType::kBFloat16), "BF16");
  EXPECT_EQ(KServeDatatype(DType::kBool), "BOOL");
  for (const char* without : {"INT16", "UINT16", "UINT32", "UINT64", "BYTES"}) {
    EXPECT_TRUE(StatusIs(DTypeOfKServeDatatype(without).status(),
                         absl::StatusCode::kInvalidArgument, {without}));
  }
  EXPECT_TRUE(StatusIs(DTypeOfKServeDatatype("fp32").status(), absl::StatusCode::kInvalidArgument,
                       {"'fp32'"}));
}

// A model of one input "v" of `dtype` and shape [-1] (the runner is not needed to read inputs).
ServedModel VectorModel(DType dtype) {
  ServedModel m;
  m.name = "v";
  m.version = "1";
  m.inputs = {{"v", dtype, {-1}}};
  m.outputs = {{"out", dtype, {-1}}};
  return m;
}

// The one input of a request to a model of one input.
absl::StatusOr<HostTensor> ReadModelInput(const inference::ModelInferRequest& request,
                                          const ServedModel& model) {
  absl::StatusOr<std::vector<HostTensor>> inputs = ReadModelInputs(request, model);
  if (!inputs.ok()) return inputs.status();
  EXPECT_EQ(inputs->size(), 1u);
  return std::move((*inputs)[0]);
}

inference::ModelInferRequest VectorRequest(const std::string& datatype, int64_t n) {
  inference::ModelInferRequest request;
  auto* input = request.add_inputs();
  input->set_name("v");
  input->set_datatype(datatype);
  input->add_shape(n);
  return request;
}

template <typename T>
std::vector<T> Values(const HostTensor& t) {
  return std::vector<T>(t.data_as<T>(), t.data_as<T>() + t.num_elements());
}

TEST(InferTensorsTest, ReadsTypedIntegerAndBoolContents) {
  {
    inference::ModelInferRequest r = VectorRequest("INT8", 3);
    for (int v : {1, -128, 127}) r.mutable_inputs(0)->mutable_contents()->add_int_contents(v);
    auto t = ReadModelInput(r, VectorModel(DType::kInt8));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(Values<int8_t>(*t), (std::vector<int8_t>{1, -128, 127}));
  }
  {
    inference::ModelInferRequest r = VectorRequest("UINT8", 2);
    for (unsigned v : {0u, 255u}) r.mutable_inputs(0)->mutable_contents()->add_uint_contents(v);
    auto t = ReadModelInput(r, VectorModel(DType::kUInt8));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(Values<uint8_t>(*t), (std::vector<uint8_t>{0, 255}));
  }
  {
    inference::ModelInferRequest r = VectorRequest("INT32", 2);
    for (int v : {-70000, 70000}) r.mutable_inputs(0)->mutable_contents()->add_int_contents(v);
    auto t = ReadModelInput(r, VectorModel(DType::kInt32));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(Values<int32_t>(*t), (std::vector<int32_t>{-70000, 70000}));
  }
  {
    inference::ModelInferRequest r = VectorRequest("BOOL", 3);
    for (bool v : {true, false, true}) {
      r.mutable_inputs(0)->mutable_contents()->add_bool_contents(v);
    }
    auto t = ReadModelInput(r, VectorModel(DType::kBool));
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(Values<bool>(*t), (std::vector<bool>{true, false, true}));
  }
}

TEST(InferTensorsTest, RefusesTypedValuesOutsideTheDatatypeNamingThem) {
  {
    inference::ModelInferRequest r = VectorRequest("INT8", 2);
    for (int v : {5, 128}) r.mutable_inputs(0)->mutable_contents()->add_int_contents(v);
    EXPECT_TRUE(StatusIs(ReadModelInput(r, VectorModel(DType::kInt8)).status(),
                         absl::StatusCode::kInvalidArgument, {"128", "position 1", "INT8"}));
  }
  {
    inference::ModelInferRequest r = VectorRequest("UINT8", 1);
    r.mutable_inputs(0)->mutable_contents()->add_uint_contents(256);
    EXPECT_TRUE(StatusIs(ReadModelInput(r, VectorModel(DType::kUInt8)).status(),
                         absl::StatusCode::kInvalidArgument, {"256", "position 0", "UINT8"}));
  }
}

TEST(InferTensorsTest, ReadsRawIntegerContents) {
  inference::ModelInferRequest r = VectorRequest("INT8", 4);
  r.add_raw_input_contents(std::string("\x01\xff\x7f\x80", 4));
  auto t = ReadModelInput(r, VectorModel(DType::kInt8));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Values<int8_t>(*t), (std::vector<int8_t>{1, -1, 127, -128}));
}

TEST(InferTensorsTest, ConvertsFloatingInputsToAFloat64Model) {
  // 1/3 in float32, sent as FP32, arrives as that float32 value widened.
  inference::ModelInferRequest r = VectorRequest("FP32", 2);
  for (float v : {1.0f / 3.0f, -2.5f})
    r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(v);
  auto t = ReadModelInput(r, VectorModel(DType::kFloat64));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DType::kFloat64);
  EXPECT_EQ(Values<double>(*t), (std::vector<double>{static_cast<double>(1.0f / 3.0f), -2.5}));
}

TEST(InferTensorsTest, AnIntegerModelTakesOnlyItsOwnDatatype) {
  for (const char* datatype : {"INT64", "FP32", "UINT8"}) {
    inference::ModelInferRequest r = VectorRequest(datatype, 0);
    EXPECT_TRUE(StatusIs(ReadModelInput(r, VectorModel(DType::kInt8)).status(),
                         absl::StatusCode::kInvalidArgument, {"takes INT8", datatype}));
  }
}

TEST(InferTensorsTest, WritesTheOutputAsRawContents) {
  ServedModel model = VectorModel(DType::kInt32);
  HostTensor out = HostTensor::FromValues<int32_t>(DType::kInt32, {2, 2}, {1, -2, 3, -4});
  inference::ModelInferResponse response;
  AppendModelOutput(model, 0, out, &response);
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "out");
  EXPECT_EQ(response.outputs(0).datatype(), "INT32");
  EXPECT_EQ(
      std::vector<int64_t>(response.outputs(0).shape().begin(), response.outputs(0).shape().end()),
      (std::vector<int64_t>{2, 2}));
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0),
            std::string(reinterpret_cast<const char*>(out.data()), out.nbytes()));
}

// A model of named inputs, as an imported program publishes: input_ids INT64 [2, 3] and
// attention_mask INT64 [2, 3]; outputs logits and hidden.
ServedModel ProgramModel() {
  ServedModel m;
  m.name = "lm";
  m.version = "1";
  m.inputs = {{"input_ids", DType::kInt64, {2, 3}}, {"attention_mask", DType::kInt64, {2, 3}}};
  m.outputs = {{"logits", DType::kFloat32, {2, 3, 5}}, {"hidden", DType::kFloat32, {2, 3, 4}}};
  return m;
}

void AddInput(inference::ModelInferRequest& r, const std::string& name, int64_t fill) {
  auto* in = r.add_inputs();
  in->set_name(name);
  in->set_datatype("INT64");
  in->add_shape(2);
  in->add_shape(3);
  for (int i = 0; i < 6; ++i) in->mutable_contents()->add_int64_contents(fill + i);
}

TEST(InferTensorsTest, NamedInputsComeInTheModelsOrderWhateverTheRequestsOrder) {
  inference::ModelInferRequest r;
  AddInput(r, "attention_mask", 100);
  AddInput(r, "input_ids", 0);
  absl::StatusOr<std::vector<HostTensor>> inputs = ReadModelInputs(r, ProgramModel());
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->size(), 2u);
  EXPECT_EQ(Values<int64_t>((*inputs)[0]), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(Values<int64_t>((*inputs)[1]), (std::vector<int64_t>{100, 101, 102, 103, 104, 105}));
  // Raw contents follow the request's order.
  inference::ModelInferRequest raw;
  for (const auto& [name, fill] :
       {std::pair<std::string, int64_t>{"attention_mask", 7}, {"input_ids", 9}}) {
    auto* in = raw.add_inputs();
    in->set_name(name);
    in->set_datatype("INT64");
    in->add_shape(2);
    in->add_shape(3);
    std::vector<int64_t> v(6, fill);
    raw.add_raw_input_contents(reinterpret_cast<const char*>(v.data()), v.size() * 8);
  }
  inputs = ReadModelInputs(raw, ProgramModel());
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_EQ(Values<int64_t>((*inputs)[0]), std::vector<int64_t>(6, 9));
  EXPECT_EQ(Values<int64_t>((*inputs)[1]), std::vector<int64_t>(6, 7));
}

TEST(InferTensorsTest, NamedInputsMissingUnknownOrTwiceAreRefused) {
  inference::ModelInferRequest one;
  AddInput(one, "input_ids", 0);
  EXPECT_TRUE(StatusIs(ReadModelInputs(one, ProgramModel()).status(),
                       absl::StatusCode::kInvalidArgument,
                       {"takes 2 inputs ('input_ids', 'attention_mask')", "has 1"}));
  inference::ModelInferRequest unknown;
  AddInput(unknown, "input_ids", 0);
  AddInput(unknown, "token_type_ids", 0);
  EXPECT_TRUE(StatusIs(ReadModelInputs(unknown, ProgramModel()).status(),
                       absl::StatusCode::kInvalidArgument,
                       {"no input 'token_type_ids'", "its inputs are 'input_ids'"}));
  inference::ModelInferRequest twice;
  AddInput(twice, "input_ids", 0);
  AddInput(twice, "input_ids", 0);
  EXPECT_TRUE(StatusIs(ReadModelInputs(twice, ProgramModel()).status(),
                       absl::StatusCode::kInvalidArgument, {"gives input 'input_ids'", "twice"}));
  inference::ModelInferRequest shape;
  AddInput(shape, "input_ids", 0);
  AddInput(shape, "attention_mask", 0);
  shape.mutable_inputs(1)->set_shape(1, 2);
  EXPECT_TRUE(StatusIs(ReadModelInputs(shape, ProgramModel()).status(),
                       absl::StatusCode::kInvalidArgument,
                       {"input 'attention_mask' of model 'lm'", "[2, 3]"}));
  inference::ModelInferRequest raw_count;
  AddInput(raw_count, "input_ids", 0);
  AddInput(raw_count, "attention_mask", 0);
  raw_count.add_raw_input_contents(std::string(48, '\0'));
  EXPECT_TRUE(StatusIs(ReadModelInputs(raw_count, ProgramModel()).status(),
                       absl::StatusCode::kInvalidArgument,
                       {"1 raw_input_contents entries for its 2 inputs"}));
}

TEST(InferTensorsTest, RequestedOutputsAreTheOnesAskedForInTheirOrder) {
  inference::ModelInferRequest none;
  absl::StatusOr<std::vector<int>> all = RequestedOutputs(none, ProgramModel());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, (std::vector<int>{0, 1}));
  inference::ModelInferRequest hidden;
  hidden.add_outputs()->set_name("hidden");
  absl::StatusOr<std::vector<int>> one = RequestedOutputs(hidden, ProgramModel());
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, (std::vector<int>{1}));
  hidden.add_outputs()->set_name("attentions");
  EXPECT_TRUE(StatusIs(RequestedOutputs(hidden, ProgramModel()).status(),
                       absl::StatusCode::kInvalidArgument,
                       {"no output 'attentions'", "its outputs are 'logits', 'hidden'"}));
}

}  // namespace
}  // namespace tessera

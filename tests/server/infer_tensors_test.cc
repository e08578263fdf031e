#include "server/modules/infer_tensors.h"

#include <cstdint>
#include <string>
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
  m.input = {"v", dtype, {-1}};
  m.output = {"out", dtype, {-1}};
  return m;
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
  AppendModelOutput(model, out, &response);
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

}  // namespace
}  // namespace tessera

#include "server/inference_service.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "gtest/gtest.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "proto/grpc_status.h"
#include "tests/support/served_test_models.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::testing::AffineModel;
using ::tessera::testing::AffineRunner;
using ::tessera::testing::StatusIs;

// x[i] for the i-th input element: multiples of 0.25 in [-1.25, 1.25], exact in FP16 and BF16.
float InputValue(int64_t i) { return static_cast<float>((i * 3) % 11 - 5) * 0.25f; }

std::vector<float> InputValues(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = InputValue(i);
  return v;
}

// The affine model worked out with loops: y = x @ (scale * A) + scale * b.
std::vector<float> AffineReference(const std::vector<float>& x, float scale) {
  const size_t rows = x.size() / 3;
  std::vector<float> y(rows * 2);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < 2; ++j) {
      float sum = scale * testing::kAffineB[j];
      for (size_t i = 0; i < 3; ++i) sum += x[r * 3 + i] * scale * testing::kAffineA[i][j];
      y[r * 2 + j] = sum;
    }
  }
  return y;
}

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

template <typename T>
std::vector<T> FromRawBytes(const std::string& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

// How a test sends the input values.
enum class Encoding { kFp32Raw, kFp32Typed, kFp64Raw, kFp64Typed, kFp16Raw, kBf16Raw };

std::string EncodingName(Encoding e) {
  switch (e) {
    case Encoding::kFp32Raw:
      return "Fp32Raw";
    case Encoding::kFp32Typed:
      return "Fp32Typed";
    case Encoding::kFp64Raw:
      return "Fp64Raw";
    case Encoding::kFp64Typed:
      return "Fp64Typed";
    case Encoding::kFp16Raw:
      return "Fp16Raw";
    case Encoding::kBf16Raw:
      return "Bf16Raw";
  }
  return "?";
}

// Sets the request's one input named `name` of `shape` to `values` in `encoding`.
void SetInput(inference::ModelInferRequest& request, const std::string& name, const Shape& shape,
              const std::vector<float>& values, Encoding encoding) {
  request.clear_inputs();
  request.clear_raw_input_contents();
  auto* input = request.add_inputs();
  input->set_name(name);
  for (int64_t size : shape) input->add_shape(size);
  std::vector<double> doubles(values.begin(), values.end());
  std::vector<uint16_t> halves;
  switch (encoding) {
    case Encoding::kFp32Raw:
      input->set_datatype("FP32");
      request.add_raw_input_contents(RawBytes(values));
      break;
    case Encoding::kFp32Typed:
      input->set_datatype("FP32");
      for (float v : values) input->mutable_contents()->add_fp32_contents(v);
      break;
    case Encoding::kFp64Raw:
      input->set_datatype("FP64");
      request.add_raw_input_contents(RawBytes(doubles));
      break;
    case Encoding::kFp64Typed:
      input->set_datatype("FP64");
      for (double v : doubles) input->mutable_contents()->add_fp64_contents(v);
      break;
    case Encoding::kFp16Raw:
      input->set_datatype("FP16");
      for (float v : values) halves.push_back(FloatToHalf(v));
      request.add_raw_input_contents(RawBytes(halves));
      break;
    case Encoding::kBf16Raw:
      input->set_datatype("BF16");
      for (float v : values) halves.push_back(FloatToBFloat16(v));
      request.add_raw_input_contents(RawBytes(halves));
      break;
  }
}

// A real gRPC server on loopback serving InferenceService over the test models, and a stub.
class InferenceServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(models_.Publish(AffineModel("affine", "2", affine2_)).ok());
    ASSERT_TRUE(models_.Publish(AffineModel("affine", "10", affine10_)).ok());
    ASSERT_TRUE(
        models_.Publish(AffineModel("batched", "1", batched_, {4, absl::Milliseconds(200)})).ok());
    ASSERT_TRUE(models_.Publish(testing::TwicePlusOneBf16Model()).ok());
    ASSERT_TRUE(models_.Publish(testing::IdsModel()).ok());
    ASSERT_TRUE(
        models_.Publish(testing::BrokenModel(absl::FailedPreconditionError("mesh 'tp' is broken")))
            .ok());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    stub_ = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  absl::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(absl::Seconds(30)));
    return FromGrpcStatus(stub_->ModelInfer(&context, request, response));
  }

  // A valid request to "affine" (the highest version): x FP32 [2, 3] raw.
  static inference::ModelInferRequest AffineRequest() {
    inference::ModelInferRequest request;
    request.set_model_name("affine");
    request.set_id("request-1");
    SetInput(request, "x", {2, 3}, InputValues(6), Encoding::kFp32Raw);
    return request;
  }

  int64_t AffineRuns() const { return affine2_->runs() + affine10_->runs(); }

  std::shared_ptr<AffineRunner> affine2_ = std::make_shared<AffineRunner>(1.0f);
  std::shared_ptr<AffineRunner> affine10_ = std::make_shared<AffineRunner>(2.0f);
  std::shared_ptr<AffineRunner> batched_ = std::make_shared<AffineRunner>(1.0f);
  ServedModels models_;
  InferenceService service_{&models_};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(InferenceServiceTest, ServerIsLiveAndReady) {
  {
    grpc::ClientContext context;
    inference::ServerLiveResponse response;
    ASSERT_TRUE(stub_->ServerLive(&context, {}, &response).ok());
    EXPECT_TRUE(response.live());
  }
  {
    grpc::ClientContext context;
    inference::ServerReadyResponse response;
    ASSERT_TRUE(stub_->ServerReady(&context, {}, &response).ok());
    EXPECT_TRUE(response.ready());
  }
}

TEST_F(InferenceServiceTest, ServerMetadataNamesTessera) {
  grpc::ClientContext context;
  inference::ServerMetadataResponse response;
  ASSERT_TRUE(stub_->ServerMetadata(&context, {}, &response).ok());
  EXPECT_EQ(response.name(), "tessera");
  EXPECT_FALSE(response.version().empty());
  EXPECT_NE(response.version(), "unknown");
  EXPECT_EQ(response.extensions_size(), 0);
}

TEST_F(InferenceServiceTest, ModelReadyForPublishedVersionsOnly) {
  const std::vector<std::tuple<std::string, std::string, bool>> cases = {
      {"affine", "", true},   {"affine", "2", true}, {"affine", "10", true},
      {"affine", "3", false}, {"nope", "", false},   {"ids", "1", true}};
  for (const auto& [name, version, ready] : cases) {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name(name);
    request.set_version(version);
    inference::ModelReadyResponse response;
    ASSERT_TRUE(stub_->ModelReady(&context, request, &response).ok());
    EXPECT_EQ(response.ready(), ready) << name << " version '" << version << "'";
  }
  // Unpublished, it is no longer ready.
  ASSERT_TRUE(models_.Unpublish("affine", "2").ok());
  grpc::ClientContext context;
  inference::ModelReadyRequest request;
  request.set_name("affine");
  request.set_version("2");
  inference::ModelReadyResponse response;
  ASSERT_TRUE(stub_->ModelReady(&context, request, &response).ok());
  EXPECT_FALSE(response.ready());
}

TEST_F(InferenceServiceTest, ModelMetadataDescribesInputsOutputsAndVersions) {
  struct Case {
    std::string name, version;
    std::vector<std::string> versions;
    std::string input, input_type;
    std::vector<int64_t> input_shape;
    std::string output_type;
    std::vector<int64_t> output_shape;
  };
  const std::vector<Case> cases = {
      {"affine", "", {"2", "10"}, "x", "FP32", {-1, 3}, "FP32", {-1, 2}},
      {"affine", "2", {"2"}, "x", "FP32", {-1, 3}, "FP32", {-1, 2}},
      {"twice_plus_one", "", {"1"}, "x", "BF16", {-1, 4}, "BF16", {-1, 4}},
      {"ids", "1", {"1"}, "ids", "INT64", {-1}, "FP32", {-1, 2}}};
  for (const Case& c : cases) {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name(c.name);
    request.set_version(c.version);
    inference::ModelMetadataResponse response;
    ASSERT_TRUE(stub_->ModelMetadata(&context, request, &response).ok()) << c.name;
    EXPECT_EQ(response.name(), c.name);
    EXPECT_EQ(std::vector<std::string>(response.versions().begin(), response.versions().end()),
              c.versions);
    EXPECT_EQ(response.platform(), "tessera");
    ASSERT_EQ(response.inputs_size(), 1);
    EXPECT_EQ(response.inputs(0).name(), c.input);
    EXPECT_EQ(response.inputs(0).datatype(), c.input_type);
    EXPECT_EQ(
        std::vector<int64_t>(response.inputs(0).shape().begin(), response.inputs(0).shape().end()),
        c.input_shape);
    ASSERT_EQ(response.outputs_size(), 1);
    EXPECT_EQ(response.outputs(0).name(), "y");
    EXPECT_EQ(response.outputs(0).datatype(), c.output_type);
    EXPECT_EQ(std::vector<int64_t>(response.outputs(0).shape().begin(),
                                   response.outputs(0).shape().end()),
              c.output_shape);
  }
}

TEST_F(InferenceServiceTest, ModelMetadataOfAnUnknownModelOrVersionIsNotFound) {
  for (const auto& [name, version, named] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{"nope", "", "nope"},
                                                                      {"affine", "3", "3"}}) {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name(name);
    request.set_version(version);
    inference::ModelMetadataResponse response;
    EXPECT_TRUE(StatusIs(FromGrpcStatus(stub_->ModelMetadata(&context, request, &response)),
                         absl::StatusCode::kNotFound, {named}));
  }
}

// (encoding, rows, version)
class AffineInferTest
    : public InferenceServiceTest,
      public ::testing::WithParamInterface<std::tuple<Encoding, int64_t, std::string>> {};

TEST_P(AffineInferTest, AnswersTheReferenceAsRawFp32) {
  const auto& [encoding, rows, version] = GetParam();
  const std::vector<float> x = InputValues(rows * 3);
  inference::ModelInferRequest request;
  request.set_model_name("affine");
  request.set_model_version(version);
  request.set_id(absl::StrCat("id-", rows, "-", version));
  SetInput(request, "x", {rows, 3}, x, encoding);
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(request, &response).ok()) << Infer(request, &response);

  const std::string ran = version.empty() ? "10" : version;
  EXPECT_EQ(response.model_name(), "affine");
  EXPECT_EQ(response.model_version(), ran);
  EXPECT_EQ(response.id(), request.id());
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "y");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_EQ(
      std::vector<int64_t>(response.outputs(0).shape().begin(), response.outputs(0).shape().end()),
      (std::vector<int64_t>{rows, 2}));
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(FromRawBytes<float>(response.raw_output_contents(0)),
            AffineReference(x, ran == "10" ? 2.0f : 1.0f));
}

INSTANTIATE_TEST_SUITE_P(
    Encodings, AffineInferTest,
    ::testing::Combine(::testing::Values(Encoding::kFp32Raw, Encoding::kFp32Typed,
                                         Encoding::kFp64Raw, Encoding::kFp64Typed,
                                         Encoding::kFp16Raw, Encoding::kBf16Raw),
                       ::testing::Values(int64_t{1}, int64_t{3}),
                       ::testing::Values(std::string(""), std::string("2"), std::string("10"))),
    [](const auto& info) {
      return absl::StrCat(EncodingName(std::get<0>(info.param)), "_", std::get<1>(info.param),
                          "rows_v",
                          std::get<2>(info.param).empty() ? "default" : std::get<2>(info.param));
    });

TEST_F(InferenceServiceTest, ABf16ModelTakesFloatInputsAndAnswersBf16) {
  const std::vector<float> x = InputValues(8);
  std::vector<uint16_t> want;
  for (float v : x) want.push_back(FloatToBFloat16(2.0f * v + 1.0f));
  for (Encoding encoding : {Encoding::kBf16Raw, Encoding::kFp16Raw, Encoding::kFp32Raw,
                            Encoding::kFp32Typed, Encoding::kFp64Typed}) {
    inference::ModelInferRequest request;
    request.set_model_name("twice_plus_one");
    SetInput(request, "x", {2, 4}, x, encoding);
    inference::ModelInferResponse response;
    ASSERT_TRUE(Infer(request, &response).ok()) << EncodingName(encoding);
    ASSERT_EQ(response.outputs_size(), 1);
    EXPECT_EQ(response.outputs(0).datatype(), "BF16");
    EXPECT_EQ(response.model_version(), "1");
    ASSERT_EQ(response.raw_output_contents_size(), 1);
    EXPECT_EQ(FromRawBytes<uint16_t>(response.raw_output_contents(0)), want)
        << EncodingName(encoding);
  }
}

TEST_F(InferenceServiceTest, AnInt64ModelTakesRawAndTypedInt64) {
  const std::vector<int64_t> ids = {0, 7, -3, 1 << 20};
  std::vector<float> want;
  for (int64_t id : ids) {
    want.push_back(static_cast<float>(id) / 2.0f);
    want.push_back(-static_cast<float>(id));
  }
  for (bool raw : {true, false}) {
    inference::ModelInferRequest request;
    request.set_model_name("ids");
    auto* input = request.add_inputs();
    input->set_name("ids");
    input->set_datatype("INT64");
    input->add_shape(4);
    if (raw) {
      request.add_raw_input_contents(RawBytes(ids));
    } else {
      for (int64_t id : ids) input->mutable_contents()->add_int64_contents(id);
    }
    inference::ModelInferResponse response;
    ASSERT_TRUE(Infer(request, &response).ok()) << (raw ? "raw" : "typed");
    ASSERT_EQ(response.outputs_size(), 1);
    EXPECT_EQ(response.outputs(0).datatype(), "FP32");
    EXPECT_EQ(FromRawBytes<float>(response.raw_output_contents(0)), want);
  }
}

TEST_F(InferenceServiceTest, AnInt64ModelRefusesOtherDatatypes) {
  for (const std::string datatype : {"FP32", "INT32", "FP16"}) {
    inference::ModelInferRequest request;
    request.set_model_name("ids");
    auto* input = request.add_inputs();
    input->set_name("ids");
    input->set_datatype(datatype);
    input->add_shape(2);
    request.add_raw_input_contents(std::string(datatype == "FP16" ? 4 : 8, '\0'));
    inference::ModelInferResponse response;
    EXPECT_TRUE(StatusIs(Infer(request, &response), absl::StatusCode::kInvalidArgument,
                         {datatype, "INT64", "'ids'"}));
  }
}

TEST_F(InferenceServiceTest, AnswersTheRequestedOutput) {
  inference::ModelInferRequest request = AffineRequest();
  request.add_outputs()->set_name("y");
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(request, &response).ok());
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "y");
  EXPECT_EQ(FromRawBytes<float>(response.raw_output_contents(0)),
            AffineReference(InputValues(6), 2.0f));
}

TEST_F(InferenceServiceTest, ARunnerFailureIsTheCallsStatus) {
  inference::ModelInferRequest request = AffineRequest();
  request.set_model_name("broken");
  inference::ModelInferResponse response;
  EXPECT_TRUE(StatusIs(Infer(request, &response), absl::StatusCode::kFailedPrecondition,
                       {"mesh 'tp' is broken"}));
}

// A malformed request: how it differs from AffineRequest(), and the code and words of its error.
struct Malformed {
  std::string name;
  std::function<void(inference::ModelInferRequest&)> change;
  absl::StatusCode code;
  std::vector<std::string> named;
};

class MalformedInferTest : public InferenceServiceTest,
                           public ::testing::WithParamInterface<Malformed> {};

TEST_P(MalformedInferTest, IsRefusedNamingTheValueAndRunsNothing) {
  const Malformed& m = GetParam();
  inference::ModelInferRequest request = AffineRequest();
  m.change(request);
  inference::ModelInferResponse response;
  EXPECT_TRUE(StatusIs(Infer(request, &response), m.code, m.named));
  EXPECT_EQ(AffineRuns(), 0);
  // The service goes on answering well-formed requests.
  inference::ModelInferResponse good;
  ASSERT_TRUE(Infer(AffineRequest(), &good).ok());
  EXPECT_EQ(FromRawBytes<float>(good.raw_output_contents(0)),
            AffineReference(InputValues(6), 2.0f));
}

using Request = inference::ModelInferRequest;
constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

INSTANTIATE_TEST_SUITE_P(
    Requests, MalformedInferTest,
    ::testing::Values(
        Malformed{"UnknownModel",
                  [](Request& r) { r.set_model_name("nope"); },
                  absl::StatusCode::kNotFound,
                  {"'nope'"}},
        Malformed{"UnknownVersion",
                  [](Request& r) { r.set_model_version("7"); },
                  absl::StatusCode::kNotFound,
                  {"'affine'", "7", "2, 10"}},
        Malformed{"NoInput",
                  [](Request& r) {
                    r.clear_inputs();
                    r.clear_raw_input_contents();
                  },
                  kInvalid,
                  {"has 0"}},
        Malformed{"TwoInputs",
                  [](Request& r) {
                    *r.add_inputs() = r.inputs(0);
                    r.add_raw_input_contents(r.raw_input_contents(0));
                  },
                  kInvalid,
                  {"has 2"}},
        Malformed{"WrongInputName",
                  [](Request& r) { r.mutable_inputs(0)->set_name("q"); },
                  kInvalid,
                  {"'q'", "'x'"}},
        Malformed{"UnknownDatatype",
                  [](Request& r) { r.mutable_inputs(0)->set_datatype("FP8"); },
                  kInvalid,
                  {"'FP8'"}},
        Malformed{"DatatypeWithoutDType",
                  [](Request& r) { r.mutable_inputs(0)->set_datatype("UINT16"); },
                  kInvalid,
                  {"UINT16"}},
        Malformed{"IntegerDatatypeForAFloatModel",
                  [](Request& r) {
                    r.mutable_inputs(0)->set_datatype("INT64");
                    r.mutable_raw_input_contents(0)->append(24, '\0');
                  },
                  kInvalid,
                  {"INT64", "FP32"}},
        Malformed{"OtherRank",
                  [](Request& r) {
                    r.mutable_inputs(0)->clear_shape();
                    r.mutable_inputs(0)->add_shape(6);
                  },
                  kInvalid,
                  {"[6]", "[-1, 3]"}},
        Malformed{"OtherColumns",
                  [](Request& r) {
                    r.mutable_inputs(0)->set_shape(0, 3);
                    r.mutable_inputs(0)->set_shape(1, 2);
                  },
                  kInvalid,
                  {"[3, 2]", "[-1, 3]"}},
        Malformed{"NegativeSize",
                  [](Request& r) { r.mutable_inputs(0)->set_shape(0, -2); },
                  kInvalid,
                  {"[-2, 3]"}},
        Malformed{"RawTooShort",
                  [](Request& r) { r.mutable_raw_input_contents(0)->resize(20); },
                  kInvalid,
                  {"20 bytes", "[2, 3]", "needs 24"}},
        Malformed{"RawTooLong",
                  [](Request& r) { r.mutable_raw_input_contents(0)->resize(28); },
                  kInvalid,
                  {"28 bytes", "needs 24"}},
        Malformed{"TwoRawEntries",
                  [](Request& r) { r.add_raw_input_contents(r.raw_input_contents(0)); },
                  kInvalid,
                  {"2 raw_input_contents"}},
        Malformed{"RawAndTypedContents",
                  [](Request& r) {
                    for (int i = 0; i < 6; ++i) {
                      r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
                    }
                  },
                  kInvalid,
                  {"both"}},
        Malformed{"TypedCountWrong",
                  [](Request& r) {
                    r.clear_raw_input_contents();
                    for (int i = 0; i < 5; ++i) {
                      r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
                    }
                  },
                  kInvalid,
                  {"5 fp32_contents", "needs 6"}},
        Malformed{"NoData",
                  [](Request& r) { r.clear_raw_input_contents(); },
                  kInvalid,
                  {"0 fp32_contents", "needs 6"}},
        Malformed{"TypedFp16",
                  [](Request& r) {
                    r.clear_raw_input_contents();
                    r.mutable_inputs(0)->set_datatype("FP16");
                  },
                  kInvalid,
                  {"FP16", "raw_input_contents"}},
        Malformed{"UnknownOutput",
                  [](Request& r) { r.add_outputs()->set_name("z"); },
                  kInvalid,
                  {"'z'", "'y'"}},
        Malformed{"UnknownOutputBesideAKnownOne",
                  [](Request& r) {
                    r.add_outputs()->set_name("y");
                    r.add_outputs()->set_name("logits");
                  },
                  kInvalid,
                  {"'logits'"}}),
    [](const auto& info) { return info.param.name; });

TEST_F(InferenceServiceTest, ConcurrentRequestsToABatchedModelShareRuns) {
  constexpr int kRequests = 12;
  std::vector<inference::ModelInferResponse> responses(kRequests);
  std::vector<absl::Status> statuses(kRequests);
  std::vector<std::vector<float>> inputs;
  for (int k = 0; k < kRequests; ++k) {
    std::vector<float> x(3);
    for (int i = 0; i < 3; ++i) x[i] = static_cast<float>(k * 3 + i) * 0.5f;
    inputs.push_back(x);
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < kRequests; ++k) {
    threads.emplace_back([&, k] {
      inference::ModelInferRequest request;
      request.set_model_name("batched");
      request.set_id(absl::StrCat("r", k));
      SetInput(request, "x", {1, 3}, inputs[k],
               k % 2 == 0 ? Encoding::kFp32Raw : Encoding::kFp32Typed);
      statuses[k] = Infer(request, &responses[k]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < kRequests; ++k) {
    ASSERT_TRUE(statuses[k].ok()) << statuses[k];
    EXPECT_EQ(responses[k].id(), absl::StrCat("r", k));
    EXPECT_EQ(FromRawBytes<float>(responses[k].raw_output_contents(0)),
              AffineReference(inputs[k], 1.0f))
        << "request " << k;
  }
  EXPECT_EQ(batched_->rows(), kRequests);
  EXPECT_LE(batched_->runs(), kRequests / 4 + 2);
}

// Requests are admitted by their bytes before they are decoded: one past --max_request_bytes is
// refused RESOURCE_EXHAUSTED and runs nothing; one that fits runs.
TEST_F(InferenceServiceTest, ARequestPastTheBytesInFlightIsRefusedBeforeItIsDecoded) {
  RequestBytes bytes("inference test", 64 << 10, "--max_request_bytes");
  service_.LimitRequestBytes(&bytes);
  inference::ModelInferRequest large;
  large.set_model_name("affine");
  SetInput(large, "x", {8192, 3}, InputValues(8192 * 3), Encoding::kFp32Raw);  // 96 KiB
  inference::ModelInferResponse response;
  EXPECT_TRUE(StatusIs(Infer(large, &response), absl::StatusCode::kResourceExhausted,
                       {"inference request of", "--max_request_bytes"}));
  EXPECT_EQ(AffineRuns(), 0);
  EXPECT_TRUE(Infer(AffineRequest(), &response).ok());
  EXPECT_EQ(bytes.in_flight(), 0);
  service_.LimitRequestBytes(nullptr);
}

TEST_F(InferenceServiceTest, ABatchedModelRefusesMoreRowsThanItsMaximum) {
  inference::ModelInferRequest request;
  request.set_model_name("batched");
  SetInput(request, "x", {5, 3}, InputValues(15), Encoding::kFp32Raw);
  inference::ModelInferResponse response;
  EXPECT_TRUE(StatusIs(Infer(request, &response), absl::StatusCode::kInvalidArgument,
                       {"5 rows", "max_batch_size 4", "'batched'"}));
  EXPECT_EQ(batched_->runs(), 0);
}

}  // namespace
}  // namespace tessera

#include "tests/support/served_test_models.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/tensor_view.h"

namespace tessera::testing {
namespace {

// INVALID_ARGUMENT unless `input` is of `dtype` with `rank` dims and `cols` columns (if > 0).
absl::Status CheckInput(const HostTensor& input, DType dtype, int rank, int64_t cols) {
  if (input.dtype() != dtype || input.rank() != rank || (cols > 0 && input.shape()[1] != cols)) {
    return absl::InvalidArgumentError(absl::StrCat("the model takes ", DTypeName(dtype), " of ",
                                                   rank, " dims, not ", DTypeName(input.dtype()),
                                                   " ", ShapeToString(input.shape())));
  }
  return absl::OkStatus();
}

// y = 2x + 1 on bfloat16, computed in float32.
class TwicePlusOneBf16 final : public ModelRunner {
 public:
  absl::StatusOr<HostTensor> Run(const HostTensor& input, absl::Time) override {
    RETURN_IF_ERROR(CheckInput(input, DType::kBFloat16, 2, 4));
    HostTensor y = input.Clone();
    uint16_t* v = y.data_as<uint16_t>();
    for (int64_t i = 0; i < y.num_elements(); ++i) {
      v[i] = FloatToBFloat16(2.0f * BFloat16ToFloat(v[i]) + 1.0f);
    }
    return y;
  }
};

// y[i] = (ids[i] / 2, -ids[i]) for int64 ids.
class Ids final : public ModelRunner {
 public:
  absl::StatusOr<HostTensor> Run(const HostTensor& input, absl::Time) override {
    RETURN_IF_ERROR(CheckInput(input, DType::kInt64, 1, 0));
    const int64_t n = input.shape()[0];
    HostTensor y = HostTensor::ZerosOfValidShape(DType::kFloat32, {n, 2});
    for (int64_t i = 0; i < n; ++i) {
      const auto id = static_cast<float>(input.data_as<int64_t>()[i]);
      y.data_as<float>()[2 * i] = id / 2.0f;
      y.data_as<float>()[2 * i + 1] = -id;
    }
    return y;
  }
};

// Fails every run.
class Failing final : public ModelRunner {
 public:
  explicit Failing(absl::Status failure) : failure_(std::move(failure)) {}
  absl::StatusOr<HostTensor> Run(const HostTensor&, absl::Time) override { return failure_; }

 private:
  const absl::Status failure_;
};

}  // namespace

absl::StatusOr<HostTensor> AffineRunner::Run(const HostTensor& input, absl::Time) {
  RETURN_IF_ERROR(CheckInput(input, DType::kFloat32, 2, 3));
  runs_.fetch_add(1);
  rows_.fetch_add(input.shape()[0]);
  HostTensor a = HostTensor::ZerosOfValidShape(DType::kFloat32, {3, 2});
  HostTensor b = HostTensor::ZerosOfValidShape(DType::kFloat32, {2});
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 2; ++j) a.data_as<float>()[i * 2 + j] = scale_ * kAffineA[i][j];
  }
  for (int j = 0; j < 2; ++j) b.data_as<float>()[j] = scale_ * kAffineB[j];
  ASSIGN_OR_RETURN(HostTensor y, HostTensor::Zeros(DType::kFloat32, {input.shape()[0], 2}));
  kernels::CpuBackend cpu;
  RETURN_IF_ERROR(cpu.Gemm(false, false, 1.0, kernels::ViewOf(input), kernels::ViewOf(a), 0.0,
                           kernels::ViewOf(y)));
  RETURN_IF_ERROR(cpu.BiasAdd(kernels::ViewOf(y), kernels::ViewOf(b)));
  return y;
}

ServedModel AffineModel(std::string name, std::string version, std::shared_ptr<AffineRunner> runner,
                        BatchingOptions batching) {
  ServedModel m;
  m.name = std::move(name);
  m.version = std::move(version);
  m.inputs = {{"x", DType::kFloat32, {-1, 3}}};
  m.outputs = {{"y", DType::kFloat32, {-1, 2}}};
  m.batching = batching;
  m.runner = std::move(runner);
  return m;
}

ServedModel TwicePlusOneBf16Model() {
  ServedModel m;
  m.name = "twice_plus_one";
  m.version = "1";
  m.inputs = {{"x", DType::kBFloat16, {-1, 4}}};
  m.outputs = {{"y", DType::kBFloat16, {-1, 4}}};
  m.runner = std::make_shared<TwicePlusOneBf16>();
  return m;
}

ServedModel IdsModel() {
  ServedModel m;
  m.name = "ids";
  m.version = "1";
  m.inputs = {{"ids", DType::kInt64, {-1}}};
  m.outputs = {{"y", DType::kFloat32, {-1, 2}}};
  m.runner = std::make_shared<Ids>();
  return m;
}

ServedModel BrokenModel(absl::Status failure) {
  ServedModel m;
  m.name = "broken";
  m.version = "1";
  m.inputs = {{"x", DType::kFloat32, {-1, 3}}};
  m.outputs = {{"y", DType::kFloat32, {-1, 2}}};
  m.runner = std::make_shared<Failing>(std::move(failure));
  return m;
}

}  // namespace tessera::testing

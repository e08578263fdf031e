// Models with known functions for the inference tests (tests/server/inference_service_test.cc) and
// the test server the Python client test calls (tests/support/kserve_test_server.cc).
#ifndef TESSERA_TESTS_SERVED_TEST_MODELS_H_
#define TESSERA_TESTS_SERVED_TEST_MODELS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/tables/served_models.h"

namespace tessera::testing {

// The affine model's weights: y = x @ (scale * A) + scale * b, x [rows, 3], y [rows, 2].
inline constexpr float kAffineA[3][2] = {{1.0f, -2.0f}, {0.5f, 3.0f}, {-1.0f, 0.25f}};
inline constexpr float kAffineB[2] = {0.5f, -1.0f};

// y = x @ (scale * A) + scale * b on float32 [rows, 3] through the CPU kernels' GEMM and bias
// add; counts its runs and the rows of each run.
class AffineRunner final : public ModelRunner {
 public:
  explicit AffineRunner(float scale) : scale_(scale) {}
  absl::StatusOr<HostTensor> Run(const HostTensor& input, absl::Time) override;
  int64_t runs() const { return runs_.load(); }
  int64_t rows() const { return rows_.load(); }

 private:
  const float scale_;
  std::atomic<int64_t> runs_{0};
  std::atomic<int64_t> rows_{0};
};

// "affine" version `version`: x FP32 [-1, 3] -> y FP32 [-1, 2], through `runner`.
ServedModel AffineModel(std::string name, std::string version, std::shared_ptr<AffineRunner> runner,
                        BatchingOptions batching = {});

// "twice_plus_one" version 1: x BF16 [-1, 4] -> y BF16 [-1, 4], y = 2x + 1 rounded to bfloat16.
ServedModel TwicePlusOneBf16Model();

// "ids" version 1: ids INT64 [-1] -> y FP32 [-1, 2], y[i] = (ids[i] / 2, -ids[i]).
ServedModel IdsModel();

// "broken" version 1: x FP32 [-1, 3] -> y FP32 [-1, 2]; every run fails with `failure`.
ServedModel BrokenModel(absl::Status failure);

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_SERVED_TEST_MODELS_H_

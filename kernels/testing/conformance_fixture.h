#ifndef TESSERA_KERNELS_TESTING_CONFORMANCE_FIXTURE_H_
#define TESSERA_KERNELS_TESTING_CONFORMANCE_FIXTURE_H_

// The fixtures of the backend conformance suite (compute_, reduce_ and data_conformance.h): every
// KernelBackend must pass the same checks against naive host loops. A test binary includes the
// suite once and defines GetDeviceUnderTest().

#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/testing/reference.h"

namespace tessera::kernels::testing {

// The device the suite runs on. With skip_if_unavailable, a FAILED_PRECONDITION from MakeBackend
// (no such device here) skips every test with its message; otherwise it fails them.
struct DeviceUnderTest {
  std::string device;
  bool skip_if_unavailable = false;
};
DeviceUnderTest GetDeviceUnderTest();

// Sets *backend to the process-wide backend under test, or skips / fails the current test.
inline void AcquireBackend(KernelBackend** backend) {
  static const auto* const made =
      new absl::StatusOr<std::unique_ptr<KernelBackend>>(MakeBackend(GetDeviceUnderTest().device));
  if (made->ok()) {
    *backend = made->value().get();
    return;
  }
  if (GetDeviceUnderTest().skip_if_unavailable &&
      made->status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << made->status().message();
  }
  FAIL() << "MakeBackend(\"" << GetDeviceUnderTest().device << "\"): " << made->status();
}

// Shared helpers of the conformance fixtures: moving host tensors to and from the backend.
class BackendAccess {
 protected:
  KernelBackend& backend() { return *backend_; }
  DeviceTensor Up(const HostTensor& host) { return backend_->Upload(host).value(); }
  HostTensor Down(const DeviceTensor& t) { return backend_->Download(t.View()).value(); }
  DeviceTensor Empty(DType dtype, const Shape& shape) {
    return backend_->Allocate(dtype, shape).value();
  }

  KernelBackend* backend_ = nullptr;
};

class KernelTest : public ::testing::Test, public BackendAccess {
 protected:
  void SetUp() override { AcquireBackend(&backend_); }
};

template <typename Param>
class KernelParamTest : public ::testing::TestWithParam<Param>, public BackendAccess {
 protected:
  void SetUp() override { AcquireBackend(&backend_); }
};

#define TESSERA_ASSERT_OK(expr)                           \
  do {                                                    \
    const absl::Status _tessera_status = (expr);          \
    ASSERT_TRUE(_tessera_status.ok()) << _tessera_status; \
  } while (0)

// "2x3" for test names; "scalar" for [].
inline std::string ShapeName(const Shape& shape) {
  return shape.empty() ? std::string("scalar") : absl::StrJoin(shape, "x");
}

// The dtypes GEMM and random fills take.
inline std::vector<DType> FloatingDTypes() {
  return {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
}

// A tensor shape and a dim of it (negative counts from the end), for the kernels along a dim.
struct DimCase {
  Shape shape;
  int64_t dim;
};
inline void PrintTo(const DimCase& c, std::ostream* os) {
  *os << ShapeToString(c.shape) << " dim " << c.dim;
}

// A shape seen as [outer, size, inner] around dim `d`.
struct Lines {
  int64_t outer = 1, size = 0, inner = 1;

  Lines(const Shape& shape, int d) : size(shape[d]) {
    for (int i = 0; i < d; ++i) outer *= shape[i];
    for (int i = d + 1; i < static_cast<int>(shape.size()); ++i) inner *= shape[i];
  }
  int64_t count() const { return outer * inner; }
  // The linear index of element i of line `line` (line = o * inner + j).
  int64_t At(int64_t line, int64_t i) const {
    return ((line / inner) * size + i) * inner + line % inner;
  }
};

// c.dim in [0, rank).
inline int NormalizedDim(const DimCase& c) {
  return static_cast<int>(c.dim < 0 ? c.dim + static_cast<int64_t>(c.shape.size()) : c.dim);
}

// The cases of the kernels along a dim: first, middle, last and negative dims, size-1 and empty
// dims, an empty outer, long lines.
inline std::vector<DimCase> DimCases() {
  return {DimCase{{2, 3, 4}, 0}, DimCase{{2, 3, 4}, 1}, DimCase{{2, 3, 4}, -1}, DimCase{{5}, 0},
          DimCase{{1, 7}, 1},    DimCase{{6, 1, 2}, 1}, DimCase{{3, 0, 2}, 1},  DimCase{{0, 3}, 1},
          DimCase{{4, 100}, 1},  DimCase{{100, 3}, 0}};
}

inline std::string DimCaseName(DType dtype, absl::string_view op, const DimCase& c) {
  return absl::StrReplaceAll(
      absl::StrCat(DTypeName(dtype), "_", op, "_", ShapeName(c.shape), "_dim", c.dim),
      {{"-", "m"}});
}

// Failures reported per test before the rest are dropped, so one bad kernel stays readable.
inline constexpr int kMaxReportedMismatches = 5;

// Fails where got's element i is not want's: bit for bit (NaN matching NaN) with tol 0, else
// within tol; counts failures in *mismatches and reports the first few.
inline void ExpectElement(const HostTensor& got, const HostTensor& want, int64_t i, double tol,
                          const std::string& what, int* mismatches) {
  const double g = GetDouble(got, i), w = GetDouble(want, i);
  const bool ok = SameElement(got, want, i) || (tol > 0 && std::abs(g - w) <= tol);
  if (!ok && (*mismatches)++ < kMaxReportedMismatches) {
    ADD_FAILURE() << what << " element " << i << ": got " << g << ", expected " << w;
  }
}

}  // namespace tessera::kernels::testing

#endif  // TESSERA_KERNELS_TESTING_CONFORMANCE_FIXTURE_H_

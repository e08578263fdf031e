// The neural-network kernels' conformance suites on the CPU backend, and the CUDA backend's
// report that it does not have them yet.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/testing/attention_conformance.h"
#include "kernels/testing/nn_argument_conformance.h"
#include "kernels/testing/nn_conformance.h"

namespace tessera::kernels {
namespace testing {

DeviceUnderTest GetDeviceUnderTest() { return {"cpu", /*skip_if_unavailable=*/false}; }

}  // namespace testing

namespace {

using testing::ScratchTensors;

// Every kernel with valid arguments on cuda:0 is UNIMPLEMENTED naming it (skipped without a
// device). Replace with the conformance suites in cuda_kernels_test.cc once they exist.
TEST(CudaNnKernelsTest, AreUnimplementedNamingTheKernel) {
  absl::StatusOr<std::unique_ptr<KernelBackend>> made = MakeBackend("cuda:0");
  if (!made.ok()) GTEST_SKIP() << made.status();
  KernelBackend& b = **made;
  ScratchTensors t(b);
  constexpr DType f32 = DType::kFloat32;
  const TensorView x = t(f32, {2, 3, 4}), w = t(f32, {4}), rows = t(f32, {6});
  const TensorView probs = t(f32, {2, 2, 3, 3}), ids = t(DType::kInt64, {2, 3});
  const ConstTensorView cw = w;
  TensorView dw = w;
  struct Call {
    std::string kernel;
    std::function<absl::Status()> run;
  };
  const std::vector<Call> calls = {
      {"silu backward", [&] { return b.ActivateBackward(Activation::kSilu, x, x, x); }},
      {"layer_norm", [&] { return b.LayerNorm(x, &cw, &cw, 1e-5, x, rows, rows); }},
      {"layer_norm backward",
       [&] { return b.LayerNormBackward(x, x, &cw, rows, rows, x, &dw, &dw); }},
      {"rms_norm", [&] { return b.RmsNorm(x, &cw, 1e-5, x, rows); }},
      {"rms_norm backward", [&] { return b.RmsNormBackward(x, x, &cw, rows, x, &dw); }},
      {"embedding",
       [&] {
         return b.Embedding(ids, t(f32, {5, 4}), 0, 5, x);
       }},
      {"embedding backward",
       [&] {
         return b.EmbeddingBackward(ids, x, 0, t(f32, {5, 4}));
       }},
      {"attention", [&] { return b.Attention(x, x, x, 2, true, x, probs); }},
      {"attention backward", [&] { return b.AttentionBackward(x, x, x, probs, x, 2, x, x, x); }},
      {"sgd step", [&] { return b.SgdStep(x, x, &dw, 0.1, 0, 0, true); }},
  };
  for (const Call& call : calls) {
    const absl::Status s = call.run();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << call.kernel << ": " << s;
    EXPECT_EQ(s.message(), call.kernel + " is not implemented on cuda yet") << s;
  }
}

}  // namespace
}  // namespace tessera::kernels

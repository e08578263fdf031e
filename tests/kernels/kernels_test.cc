// The kernel backends' host-side pieces (Philox, broadcasting, the device factory), the CPU
// backend's oneDNN Linear products (prepared weights, threads), and the
// conformance suite (compute, elementwise ops, reductions and the other kernels along a dim,
// indexing, data, and the memory space's layout moves against core's host versions) run on the
// CPU backend.

#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/broadcast.h"
#include "kernels/cpu/blas_config.h"
#include "kernels/philox.h"
#include "kernels/testing/compute_conformance.h"
#include "kernels/testing/data_conformance.h"
#include "kernels/testing/dim_conformance.h"
#include "kernels/testing/elementwise_conformance.h"
#include "kernels/testing/index_conformance.h"
#include "kernels/testing/layout_conformance.h"
#include "kernels/testing/reduce_conformance.h"
#include "kernels/testing/sort_conformance.h"

namespace tessera::kernels {
namespace testing {

DeviceUnderTest GetDeviceUnderTest() { return {"cpu", /*skip_if_unavailable=*/false}; }

}  // namespace testing

namespace {

// Known-answer vectors of Random123's tests/kat_vectors (counter, key -> output).
TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  struct Vector {
    Philox4x32 counter;
    uint32_t key0, key1;
    Philox4x32 want;
  };
  const Vector vectors[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Vector& v : vectors) {
    const Philox4x32 got = Philox4x32_10(v.counter, v.key0, v.key1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], v.want.v[i]) << "word " << i;
  }
}

TEST(PhiloxTest, ElementCounterIsTheIndexAndKeyIsTheSeed) {
  const uint64_t seed = 0x0123456789abcdefull, index = 0x00000005fffffffeull;
  const Philox4x32 got = PhiloxForElement(seed, index);
  const Philox4x32 want = Philox4x32_10({{0xfffffffe, 0x5, 0, 0}}, 0x89abcdef, 0x01234567);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]);
}

TEST(PhiloxTest, UniformMapsStayBelowOne) {
  const Philox4x32 ones = {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}};
  EXPECT_LT(UniformFloat32(ones), 1.0f);
  EXPECT_LT(UniformFloat64(ones), 1.0);
  EXPECT_LT(FloatToHalf(UniformFloat16(ones)), FloatToHalf(1.0f));
  EXPECT_LT(FloatToBFloat16(UniformBFloat16(ones)), FloatToBFloat16(1.0f));
  const Philox4x32 zeros = {{0, 0, 0, 0}};
  EXPECT_EQ(UniformFloat32(zeros), 0.0f);
  EXPECT_TRUE(std::isfinite(NormalValue(zeros)));
}

TEST(BroadcastTest, ShapesFollowNumpy) {
  EXPECT_EQ(BroadcastShapes(Shape{2, 1, 4}, Shape{3, 1}).value(), (Shape{2, 3, 4}));
  EXPECT_EQ(BroadcastShapes(Shape{}, Shape{5}).value(), (Shape{5}));
  EXPECT_EQ(BroadcastShapes(Shape{0, 3}, Shape{1}).value(), (Shape{0, 3}));
  const absl::Status s = BroadcastShapes(Shape{2, 3}, Shape{4}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[2, 3]"), absl::string_view::npos) << s;
}

TEST(BroadcastTest, LayoutMergesContiguousDims) {
  const BroadcastLayout same = MakeBroadcastLayout(Shape{2, 3, 4}, Shape{2, 3, 4}, Shape{2, 3, 4});
  EXPECT_EQ(same.shape, (Shape{24}));
  const BroadcastLayout bias = MakeBroadcastLayout(Shape{2, 3, 4}, Shape{4}, Shape{2, 3, 4});
  EXPECT_EQ(bias.shape, (Shape{6, 4}));
  EXPECT_EQ(bias.a_strides, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(bias.b_strides, (std::vector<int64_t>{0, 1}));
}

TEST(BroadcastTest, ThreeInputLayoutMergesWhereEveryInputAllows) {
  const BroadcastLayout3 same =
      MakeBroadcastLayout3(Shape{2, 3, 4}, Shape{2, 3, 4}, Shape{2, 3, 4}, Shape{2, 3, 4});
  EXPECT_EQ(same.shape, (Shape{24}));
  // The condition repeats over the last dim, b over the first two: nothing merges.
  const BroadcastLayout3 mixed =
      MakeBroadcastLayout3(Shape{2, 3, 1}, Shape{2, 3, 4}, Shape{4}, Shape{2, 3, 4});
  EXPECT_EQ(mixed.shape, (Shape{6, 4}));
  EXPECT_EQ(mixed.strides[0], (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(mixed.strides[1], (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(mixed.strides[2], (std::vector<int64_t>{0, 1}));
  const BroadcastLayout3 scalar = MakeBroadcastLayout3(Shape{}, Shape{1}, Shape{}, Shape{1});
  EXPECT_TRUE(scalar.shape.empty());
}

TEST(MakeBackendTest, ParsesDeviceNames) {
  absl::StatusOr<std::unique_ptr<KernelBackend>> cpu = MakeBackend("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->device(), "cpu");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "CPU"}) {
    const absl::Status s = MakeBackend(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
    EXPECT_NE(s.message().find(bad), absl::string_view::npos) << s;
  }
}

TEST(MakeBackendTest, CudaIsAvailableOrAFailedPreconditionSayingWhy) {
  absl::StatusOr<std::unique_ptr<KernelBackend>> cuda = MakeBackend("cuda:0");
  if (cuda.ok()) {
    EXPECT_EQ((*cuda)->device(), "cuda:0");
    return;
  }
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition) << cuda.status();
  EXPECT_FALSE(cuda.status().message().empty());
  const absl::Status far = MakeBackend("cuda:4096").status();
  EXPECT_EQ(far.code(), absl::StatusCode::kFailedPrecondition) << far;
}

// The threads this process runs, from /proc/self/status.
int ProcessThreads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(CpuLinearTest, PreparesFloat32WeightsOnly) {
  std::unique_ptr<KernelBackend> cpu = MakeBackend("cpu").value();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16}) {
    DeviceTensor w = cpu->Upload(testing::RandomTensor(dtype, {6, 4}, 1)).value();
    absl::StatusOr<std::shared_ptr<const PreparedWeight>> prepared =
        cpu->PrepareLinearWeight(w.View(), 3);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    EXPECT_EQ(*prepared != nullptr, dtype == DType::kFloat32) << DTypeName(dtype);
  }
}

// oneDNN computes on OpenMP threads; with one BLAS thread a product starts none.
TEST(CpuLinearTest, OneBlasThreadStartsNoThreads) {
  std::unique_ptr<KernelBackend> cpu = MakeBackend("cpu").value();
  SetBlasThreads(1);
  DeviceTensor x = cpu->Upload(testing::RandomTensor(DType::kFloat32, {64, 512}, 1)).value();
  DeviceTensor w = cpu->Upload(testing::RandomTensor(DType::kFloat32, {256, 512}, 2)).value();
  DeviceTensor y = cpu->Allocate(DType::kFloat32, {64, 256}).value();
  const int before = ProcessThreads();
  ASSERT_GT(before, 0);
  std::shared_ptr<const PreparedWeight> prepared = cpu->PrepareLinearWeight(w.View(), 64).value();
  TESSERA_ASSERT_OK(cpu->LinearProduct(x.View(), w.View(), prepared.get(), y.View()));
  TESSERA_ASSERT_OK(cpu->LinearProduct(x.View(), w.View(), nullptr, y.View()));
  EXPECT_EQ(ProcessThreads(), before);
}

// With T BLAS threads, each thread that runs a product gets its own OpenMP team of T - 1 helpers,
// kept while it lives (libgomp's pool per calling thread) and ended with it: a worker's threads
// are bounded by the threads that call (its command threads, one product at a time) times T.
TEST(CpuLinearTest, ProductThreadsAreBoundedByTheCallersAndEndWithThem) {
  std::unique_ptr<KernelBackend> cpu = MakeBackend("cpu").value();
  constexpr int kThreads = 2, kCallers = 4;
  SetBlasThreads(kThreads);
  DeviceTensor x = cpu->Upload(testing::RandomTensor(DType::kFloat32, {64, 512}, 1)).value();
  DeviceTensor w = cpu->Upload(testing::RandomTensor(DType::kFloat32, {256, 512}, 2)).value();
  std::shared_ptr<const PreparedWeight> prepared = cpu->PrepareLinearWeight(w.View(), 64).value();
  const int before = ProcessThreads();
  ASSERT_GT(before, 0);
  {
    absl::Mutex one_at_a_time;  // as the worker's sequencer runs commands
    absl::Notification computed_all, finish;
    std::atomic<int> computed = 0;
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; ++c) {
      callers.emplace_back([&] {
        DeviceTensor y = cpu->Allocate(DType::kFloat32, {64, 256}).value();
        for (int run = 0; run < 3; ++run) {
          absl::MutexLock lock(&one_at_a_time);
          EXPECT_TRUE(cpu->LinearProduct(x.View(), w.View(), prepared.get(), y.View()).ok());
          EXPECT_TRUE(cpu->LinearProduct(x.View(), w.View(), nullptr, y.View()).ok());
        }
        if (++computed == kCallers) computed_all.Notify();
        finish.WaitForNotification();
      });
    }
    computed_all.WaitForNotification();
    const int during = ProcessThreads();
    EXPECT_GT(during, before + kCallers) << "the products ran on one thread each";
    EXPECT_LE(during, before + kCallers * kThreads);
    finish.Notify();
    for (std::thread& t : callers) t.join();
  }
  // The teams end with their callers (libgomp frees a team as its thread exits).
  for (int i = 0; i < 100 && ProcessThreads() > before; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(ProcessThreads(), before);
  SetBlasThreads(1);
}

}  // namespace
}  // namespace tessera::kernels

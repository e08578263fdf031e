// NcclCommunicator on groups of 1 to min(4, GPUs) ranks, one GPU per rank, run as threads of this
// process. Results are compared with the single-process reference of core's ReduceInto and
// DivideInPlace, exactly except for floating averages (ncclAvg sums x/size, which may round
// differently from sum/size). Without a usable GPU the GPU tests skip with the reason, and the
// checks that need no GPU still run; without CUDA in the build everything skips.

#include "gtest/gtest.h"

#if TESSERA_COMM_WITH_NCCL

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/elementwise_reduce.h"
#include "core/placement.h"
#include "gloo/rendezvous/hash_store.h"
#include "gmock/gmock.h"
#include "worker/comm/make_communicator.h"
#include "worker/comm/nccl_communicator.h"

namespace tessera::comm {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using Bytes = std::vector<std::byte>;

constexpr int64_t kCounts[] = {0, 1, 7, 1001};

// Why GPU tests cannot run here ("" when at least one device is usable).
std::string NoGpuReason() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) {
    return absl::StrFormat("no CUDA device: cudaGetDeviceCount failed: %s (%d): %s",
                           cudaGetErrorName(e), static_cast<int>(e), cudaGetErrorString(e));
  }
  if (devices == 0) return "no CUDA device: cudaGetDeviceCount found 0 devices";
  return "";
}

int DeviceCount() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess ? devices : 0;
}

#define SKIP_WITHOUT_GPU()                                           \
  do {                                                               \
    if (const std::string reason = NoGpuReason(); !reason.empty()) { \
      GTEST_SKIP() << reason;                                        \
    }                                                                \
  } while (0)

gloo::rendezvous::HashStore& Store() {
  static auto* store = new gloo::rendezvous::HashStore;
  return *store;
}

int next_group = 0;

// A device buffer on the calling thread's current device.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) {
      EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess);
    }
  }
  explicit DeviceBuffer(const Bytes& host) : DeviceBuffer(host.size()) {
    if (!host.empty()) {
      EXPECT_EQ(cudaMemcpy(ptr_, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  Bytes ToHost() const {
    Bytes host(bytes_);
    if (bytes_ > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return host;
  }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
};

// A group of `size` ranks on devices 0..size-1: rank r's thread always runs on device r.
class Group {
 public:
  explicit Group(int size, absl::Duration timeout = absl::Seconds(60)) : size_(size) {
    comms_.resize(size);
    const std::string prefix = absl::StrCat("nccl-test/", next_group++);
    const auto statuses = OnEveryRank([&](int r) {
      NcclCommunicatorOptions options;
      options.device = r;
      options.timeout = timeout;
      auto comm = NcclCommunicator::Create(Store(), prefix, r, size_, options);
      if (!comm.ok()) return comm.status();
      comms_[r] = std::move(*comm);
      return absl::OkStatus();
    });
    for (const auto& s : statuses) EXPECT_TRUE(s.ok()) << s;
  }

  int size() const { return size_; }
  NcclCommunicator& operator[](int r) { return *comms_[r]; }

  // Runs fn(rank) on one thread per rank, each on its rank's device.
  std::vector<absl::Status> OnEveryRank(const std::function<absl::Status(int)>& fn) {
    std::vector<absl::Status> results(size_);
    std::vector<std::thread> threads;
    for (int r = 0; r < size_; ++r) {
      threads.emplace_back([&, r] {
        cudaSetDevice(r);
        results[r] = fn(r);
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

 private:
  int size_;
  std::vector<std::unique_ptr<NcclCommunicator>> comms_;
};

// Inputs for which the order of a reduction cannot change the result (see gloo_communicator_test).
Bytes Values(DType dtype, int64_t n, int rank, int salt) {
  Bytes out(static_cast<size_t>(n) * DTypeSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = (static_cast<uint64_t>(i) * 2654435761u) ^
                       (static_cast<uint64_t>(rank + 1) * 40503u) ^
                       (static_cast<uint64_t>(salt) << 20);
    const uint64_t mixed = h * 0x9E3779B97F4A7C15ull >> 17;
    const int k = static_cast<int>(mixed % 12);
    const float f = (k < 6 ? k - 6 : k - 5) * 0.5f;
    std::byte* p = out.data() + i * DTypeSize(dtype);
    auto put = [p](auto v) { std::memcpy(p, &v, sizeof(v)); };
    switch (dtype) {
      case DType::kFloat32:
        put(f);
        break;
      case DType::kFloat64:
        put(static_cast<double>(f));
        break;
      case DType::kFloat16:
        put(FloatToHalf(f));
        break;
      case DType::kBFloat16:
        put(FloatToBFloat16(f));
        break;
      case DType::kInt8:
        put(static_cast<int8_t>(mixed));
        break;
      case DType::kUInt8:
        put(static_cast<uint8_t>(mixed));
        break;
      case DType::kInt32:
        put(static_cast<int32_t>(mixed));
        break;
      case DType::kInt64:
        put(static_cast<int64_t>(mixed * 0x100000001ull));
        break;
      case DType::kBool:
        put(static_cast<bool>(mixed & 1));
        break;
    }
  }
  return out;
}

Bytes Reference(ReduceOp op, DType dtype, const std::vector<Bytes>& inputs, int64_t offset,
                int64_t n) {
  const size_t es = DTypeSize(dtype);
  Bytes acc(inputs[0].begin() + offset * es, inputs[0].begin() + (offset + n) * es);
  for (size_t r = 1; r < inputs.size(); ++r) {
    ReduceInto(op, dtype, acc.data(), inputs[r].data() + offset * es, n);
  }
  if (op == ReduceOp::kAvg)
    DivideInPlace(dtype, acc.data(), n, static_cast<int64_t>(inputs.size()));
  return acc;
}

double AsDouble(const std::byte* p, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return HalfToFloat(v);
    }
    case DType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return BFloat16ToFloat(v);
    }
    default:
      return 0;
  }
}

// "" if equal (within one rounding of the dtype when `approximate`), else the first difference.
std::string Diff(const Bytes& got, const Bytes& want, DType dtype, bool approximate) {
  if (got.size() != want.size()) return absl::StrCat("size ", got.size(), " != ", want.size());
  const size_t es = DTypeSize(dtype);
  const double tolerance = dtype == DType::kBFloat16  ? 1.0 / 128
                           : dtype == DType::kFloat16 ? 1.0 / 1024
                           : dtype == DType::kFloat32 ? 1e-6
                                                      : 1e-15;
  for (size_t i = 0; i < got.size(); i += es) {
    if (std::memcmp(&got[i], &want[i], es) == 0) continue;
    if (approximate) {
      const double g = AsDouble(&got[i], dtype), w = AsDouble(&want[i], dtype);
      if (std::abs(g - w) <= tolerance * std::max(1.0, std::abs(w))) continue;
    }
    uint64_t g = 0, w = 0;
    std::memcpy(&g, &got[i], es);
    std::memcpy(&w, &want[i], es);
    return absl::StrFormat("element %d: got bits 0x%x, want 0x%x", i / es, g, w);
  }
  return "";
}

void ExpectAllOk(const std::vector<absl::Status>& statuses, const std::string& what) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_TRUE(statuses[r].ok()) << what << ", rank " << r << ": " << statuses[r];
  }
}

class NcclCollectiveTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    if (GetParam() > DeviceCount()) {
      GTEST_SKIP() << GetParam() << " ranks need " << GetParam() << " GPUs; this machine has "
                   << DeviceCount();
    }
    group_ = std::make_unique<Group>(GetParam());
  }
  Group& group() { return *group_; }
  int size() const { return GetParam(); }

 private:
  std::unique_ptr<Group> group_;
};

TEST_P(NcclCollectiveTest, ReductionsEqualReference) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (int64_t count : kCounts) {
        const std::string what = absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op), " ", count);
        const bool approximate = op == ReduceOp::kAvg && IsFloatingPoint(dtype);
        const int root = static_cast<int>(count % size());
        std::vector<Bytes> in(size()), rs_in(size()), all(size()), red(size()), rs(size());
        for (int r = 0; r < size(); ++r) {
          in[r] = Values(dtype, count, r, 1);
          rs_in[r] = Values(dtype, size() * count, r, 2);
        }
        ExpectAllOk(group().OnEveryRank([&](int r) {
          DeviceBuffer a(in[r]), b(in[r]), c(rs_in[r]), d(count * DTypeSize(dtype));
          absl::Status s = group()[r].AllReduce(a.get(), count, dtype, op);
          if (s.ok()) s = group()[r].Reduce(b.get(), count, dtype, op, root);
          if (s.ok()) s = group()[r].ReduceScatter(c.get(), d.get(), count, dtype, op);
          all[r] = a.ToHost();
          red[r] = b.ToHost();
          rs[r] = d.ToHost();
          return s;
        }),
                    what);
        for (int r = 0; r < size(); ++r) {
          EXPECT_EQ(Diff(all[r], Reference(op, dtype, in, 0, count), dtype, approximate), "")
              << "AllReduce " << what << ", rank " << r;
          EXPECT_EQ(Diff(red[r], r == root ? Reference(op, dtype, in, 0, count) : in[r], dtype,
                         approximate),
                    "")
              << "Reduce " << what << ", rank " << r;
          EXPECT_EQ(Diff(rs[r], Reference(op, dtype, rs_in, r * count, count), dtype, approximate),
                    "")
              << "ReduceScatter " << what << ", rank " << r;
        }
      }
    }
  }
}

TEST_P(NcclCollectiveTest, DataMovementEqualsReference) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      const std::string what = absl::StrCat(DTypeName(dtype), " ", count);
      const size_t block = count * DTypeSize(dtype);
      const int root = static_cast<int>((count + 1) % size());
      std::vector<Bytes> in(size()), blocks(size()), bcast(size()), gathered(size()),
          gather_root(size()), scattered(size()), transposed(size());
      Bytes concat;
      for (int r = 0; r < size(); ++r) {
        in[r] = Values(dtype, count, r, 3);
        blocks[r] = Values(dtype, size() * count, r, 4);
        concat.insert(concat.end(), in[r].begin(), in[r].end());
      }
      ExpectAllOk(group().OnEveryRank([&](int r) {
        DeviceBuffer b(in[r]), send(in[r]), all(size() * block), g(size() * block), many(blocks[r]),
            one(block), t(size() * block);
        absl::Status s = group()[r].Broadcast(b.get(), count, dtype, root);
        if (s.ok()) s = group()[r].AllGather(send.get(), all.get(), count, dtype);
        if (s.ok())
          s = group()[r].Gather(send.get(), r == root ? g.get() : nullptr, count, dtype, root);
        if (s.ok())
          s = group()[r].Scatter(r == root ? many.get() : nullptr, one.get(), count, dtype, root);
        if (s.ok()) s = group()[r].AllToAll(many.get(), t.get(), count, dtype);
        bcast[r] = b.ToHost();
        gathered[r] = all.ToHost();
        gather_root[r] = g.ToHost();
        scattered[r] = one.ToHost();
        transposed[r] = t.ToHost();
        return s;
      }),
                  what);
      EXPECT_EQ(Diff(gather_root[root], concat, dtype, false), "") << "Gather " << what;
      for (int r = 0; r < size(); ++r) {
        EXPECT_EQ(Diff(bcast[r], in[root], dtype, false), "") << "Broadcast " << what;
        EXPECT_EQ(Diff(gathered[r], concat, dtype, false), "") << "AllGather " << what;
        EXPECT_EQ(
            Diff(scattered[r],
                 Bytes(blocks[root].begin() + r * block, blocks[root].begin() + (r + 1) * block),
                 dtype, false),
            "")
            << "Scatter " << what << ", rank " << r;
        for (int from = 0; from < size(); ++from) {
          EXPECT_EQ(
              Diff(Bytes(transposed[r].begin() + from * block,
                         transposed[r].begin() + (from + 1) * block),
                   Bytes(blocks[from].begin() + r * block, blocks[from].begin() + (r + 1) * block),
                   dtype, false),
              "")
              << "AllToAll " << what << ", rank " << r << " from " << from;
        }
      }
    }
  }
}

TEST_P(NcclCollectiveTest, SendRecvAndBarrier) {
  if (size() == 1) GTEST_SKIP() << "a single rank has no peer";
  std::vector<Bytes> in(size()), out(size());
  for (int r = 0; r < size(); ++r) in[r] = Values(DType::kFloat32, 1001, r, 5);
  ExpectAllOk(group().OnEveryRank([&](int r) {
    DeviceBuffer send(in[r]), recv(in[r].size());
    const int next = (r + 1) % size(), prev = (r + size() - 1) % size();
    absl::Status s = r % 2 == 0 ? group()[r].Send(send.get(), 1001, DType::kFloat32, next, 0)
                                : group()[r].Recv(recv.get(), 1001, DType::kFloat32, prev, 0);
    if (s.ok()) {
      s = r % 2 == 0 ? group()[r].Recv(recv.get(), 1001, DType::kFloat32, prev, 0)
                     : group()[r].Send(send.get(), 1001, DType::kFloat32, next, 0);
    }
    if (s.ok()) s = group()[r].Barrier();
    out[r] = recv.ToHost();
    return s;
  }),
              "send/recv ring");
  for (int r = 0; r < size(); ++r) {
    EXPECT_EQ(Diff(out[r], in[(r + size() - 1) % size()], DType::kFloat32, false), "") << r;
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, NcclCollectiveTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return absl::StrCat("ranks", info.param); });

TEST(NcclCommunicatorTest, WithoutAGpuCreateIsFailedPrecondition) {
  if (NoGpuReason().empty()) GTEST_SKIP() << "this machine has a GPU";
  NcclCommunicatorOptions options;
  auto comm = NcclCommunicator::Create(Store(), "no-gpu", 0, 1, options);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition) << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("no CUDA device"));
  auto via_factory = MakeCommunicator("cuda:0", Store(), "no-gpu-factory", 0, 1, {});
  EXPECT_EQ(via_factory.status().code(), absl::StatusCode::kFailedPrecondition)
      << via_factory.status();
}

TEST(NcclCommunicatorTest, BadArgumentsAreInvalid) {
  SKIP_WITHOUT_GPU();
  Group group(1);
  void* raw = nullptr;
  ASSERT_EQ(cudaMalloc(&raw, 16 * sizeof(float)), cudaSuccess);
  auto* data = static_cast<float*>(raw);
  EXPECT_EQ(group[0].Broadcast(data, 4, DType::kFloat32, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(group[0].AllToAll(data, data + 1, 4, DType::kFloat32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(group[0].Send(data, 4, DType::kFloat32, 0, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(group[0].Health().ok());
  EXPECT_EQ(group[0].backend(), "nccl");
  cudaFree(data);
}

TEST(NcclCommunicatorTest, InitializationWithoutPeersTimesOut) {
  SKIP_WITHOUT_GPU();
  NcclCommunicatorOptions options;
  options.timeout = absl::Seconds(2);
  const absl::Time start = absl::Now();
  auto comm = NcclCommunicator::Create(Store(), "nccl-lonely", 0, 2, options);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(NcclCommunicatorTest, MissingRankTimesOutAbortsAndBreaks) {
  SKIP_WITHOUT_GPU();
  if (DeviceCount() < 2) GTEST_SKIP() << "needs 2 GPUs; this machine has " << DeviceCount();
  Group group(2, absl::Seconds(5));  // rank 1's teardown waits at most this long
  cudaSetDevice(0);
  DeviceBuffer data(64 * sizeof(float));
  const absl::Time start = absl::Now();
  const absl::Status s =
      group[0].AllReduce(data.get(), 64, DType::kFloat32, ReduceOp::kSum, absl::Seconds(1));
  EXPECT_THAT(s.code(), AnyOf(absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kUnavailable))
      << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(group[0].Health().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(group[0].Barrier().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::comm

#else  // !TESSERA_COMM_WITH_NCCL

TEST(NcclCommunicatorTest, NotBuilt) {
  GTEST_SKIP() << "this build has no CUDA (TESSERA_WITH_CUDA is off): NcclCommunicator is not "
                  "compiled";
}

#endif  // TESSERA_COMM_WITH_NCCL

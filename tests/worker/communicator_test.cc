// One suite for every Communicator transport, as the kernel conformance suite is one for every
// backend: Gloo (host buffers over loopback TCP) and, in builds with CUDA, NCCL (device buffers,
// one GPU per rank), each on groups of 1 to 4 ranks run as threads of this process. Every
// collective, dtype and reduce op is compared with a single-process reference computed with core's
// ReduceInto and DivideInPlace. Inputs are chosen so that the order of a reduction cannot change
// the result: integers wrap (modular arithmetic is associative), floats are nonzero multiples of
// 0.5 small enough to add and multiply exactly. Results are compared bit for bit, except NCCL's
// floating averages (ncclAvg sums x/size, which may round differently from sum/size): within one
// rounding. A NCCL case that cannot run here (no CUDA device or driver, fewer GPUs than ranks)
// skips with a line saying why.

#include "worker/comm/communicator.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/sharding/placement.h"
#include "gloo/rendezvous/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/comm/make_communicator.h"

#if TESSERA_COMM_WITH_NCCL
#include <cuda_runtime_api.h>
#endif

namespace tessera::comm {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using Bytes = std::vector<std::byte>;

constexpr int64_t kCounts[] = {0, 1, 7, 1001};

// The rendezvous store every group of this process shares, each under its own prefix.
gloo::rendezvous::HashStore& Store() {
  static auto* store = new gloo::rendezvous::HashStore;
  return *store;
}

// A rank's buffer in the memory its transport reads.
class Buffer {
 public:
  virtual ~Buffer() = default;
  // The first byte; null when empty.
  virtual std::byte* get() = 0;
  virtual Bytes ToHost() const = 0;
};

// What the suite needs of a transport: its communicators, rank threads on the right device, and
// buffers where its collectives read and write.
class Transport {
 public:
  virtual ~Transport() = default;
  // The backend() of its communicators: "gloo" or "nccl".
  virtual std::string name() const = 0;
  // Why a group of `size` ranks cannot run on this machine; "" when it can.
  virtual std::string Unavailable(int size) const = 0;
  // MakeCommunicator's device type for rank `rank`.
  virtual std::string DeviceType(int rank) const = 0;
  // Called first on each rank's thread.
  virtual void EnterRank(int rank) const = 0;
  // A buffer holding a copy of `host`, on the calling rank's device.
  virtual std::unique_ptr<Buffer> Copy(const Bytes& host) const = 0;
  // Whether a floating average is sum/size rounded once, as the reference computes it.
  virtual bool exact_float_average() const = 0;
  // How long past its timeout a failing call or rendezvous may take to return.
  virtual absl::Duration failure_slack() const = 0;
};

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(Bytes bytes) : bytes_(std::move(bytes)) {}
  std::byte* get() override { return bytes_.empty() ? nullptr : bytes_.data(); }
  Bytes ToHost() const override { return bytes_; }

 private:
  Bytes bytes_;
};

class GlooTransport final : public Transport {
 public:
  std::string name() const override { return "gloo"; }
  std::string Unavailable(int) const override { return ""; }
  std::string DeviceType(int) const override { return "cpu"; }
  void EnterRank(int) const override {}
  std::unique_ptr<Buffer> Copy(const Bytes& host) const override {
    return std::make_unique<HostBuffer>(host);
  }
  bool exact_float_average() const override { return true; }
  absl::Duration failure_slack() const override { return absl::Seconds(2); }
};

#if TESSERA_COMM_WITH_NCCL

// A buffer on the calling thread's current device.
class DeviceBuffer final : public Buffer {
 public:
  explicit DeviceBuffer(const Bytes& host) : bytes_(host.size()) {
    if (bytes_ == 0) return;
    EXPECT_EQ(cudaMalloc(&ptr_, bytes_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() override {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::byte* get() override { return static_cast<std::byte*>(ptr_); }
  Bytes ToHost() const override {
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

// Rank r runs on GPU r.
class NcclTransport final : public Transport {
 public:
  std::string name() const override { return "nccl"; }
  std::string Unavailable(int size) const override {
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess) {
      return absl::StrFormat(
          "nccl: no CUDA device or driver: cudaGetDeviceCount failed: %s (%d): %s",
          cudaGetErrorName(e), static_cast<int>(e), cudaGetErrorString(e));
    }
    if (devices == 0) return "nccl: no CUDA device: cudaGetDeviceCount found 0 devices";
    if (devices < size) {
      return absl::StrFormat("nccl: %d ranks need %d GPUs; this machine has %d", size, size,
                             devices);
    }
    return "";
  }
  std::string DeviceType(int rank) const override { return absl::StrCat("cuda:", rank); }
  void EnterRank(int rank) const override { cudaSetDevice(rank); }
  std::unique_ptr<Buffer> Copy(const Bytes& host) const override {
    return std::make_unique<DeviceBuffer>(host);
  }
  bool exact_float_average() const override { return false; }
  // Timing out aborts the NCCL communicator, which may take seconds.
  absl::Duration failure_slack() const override { return absl::Seconds(9); }
};

#endif  // TESSERA_COMM_WITH_NCCL

// Every transport this build has, by name.
const std::map<std::string, const Transport*>& AllTransports() {
  static const auto* const all = [] {
    auto* transports = new std::map<std::string, const Transport*>;
    auto add = [transports](const Transport* t) { (*transports)[t->name()] = t; };
    add(new GlooTransport);
#if TESSERA_COMM_WITH_NCCL
    add(new NcclTransport);
#endif
    return transports;
  }();
  return *all;
}

// The names of AllTransports(): the suites' parameter.
std::vector<std::string> Transports() {
  std::vector<std::string> names;
  for (const auto& [name, transport] : AllTransports()) names.push_back(name);
  return names;
}

// Runs fn(rank) on one thread per rank, each entered on its rank's device, and returns each rank's
// result.
std::vector<absl::Status> OnEveryRank(const Transport& transport, int size,
                                      const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      transport.EnterRank(r);
      results[r] = fn(r);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// Rank `rank` of a group of `size` under `prefix`, made as a worker makes it.
absl::StatusOr<std::unique_ptr<Communicator>> Create(const Transport& transport,
                                                     const std::string& prefix, int rank, int size,
                                                     absl::Duration timeout) {
  CommunicatorOptions options;
  options.timeout = timeout;
  return MakeCommunicator(transport.DeviceType(rank), Store(), prefix, rank, size, options);
}

// Connects a fresh group of `size` ranks under `prefix`.
std::vector<std::unique_ptr<Communicator>> Connect(const Transport& transport, int size,
                                                   const std::string& prefix,
                                                   absl::Duration timeout = absl::Seconds(60)) {
  std::vector<std::unique_ptr<Communicator>> comms(size);
  const auto statuses = OnEveryRank(transport, size, [&](int r) {
    auto comm = Create(transport, prefix, r, size, timeout);
    if (!comm.ok()) return comm.status();
    comms[r] = std::move(*comm);
    return absl::OkStatus();
  });
  for (const auto& s : statuses) EXPECT_TRUE(s.ok()) << s;
  return comms;
}

// The groups the collective tests share: one per transport and size, connected on first use from a
// test's main thread, once per process (contexts are costly to create), and closed when the tests
// end.
class Groups : public ::testing::Environment {
 public:
  static std::vector<std::unique_ptr<Communicator>>& Of(const Transport& transport, int size) {
    auto& group = groups_[{transport.name(), size}];
    if (group.empty()) {
      group = Connect(transport, size, absl::StrCat("shared/", transport.name(), "/", size));
    }
    return group;
  }
  void TearDown() override { groups_.clear(); }

 private:
  static inline std::map<std::pair<std::string, int>, std::vector<std::unique_ptr<Communicator>>>
      groups_;
};
[[maybe_unused]] auto* const kGroups = ::testing::AddGlobalTestEnvironment(new Groups);

// Distinct inputs for (rank, salt): see the file comment for why they make reductions exact.
Bytes Values(DType dtype, int64_t n, int rank, int salt) {
  Bytes out(static_cast<size_t>(n) * DTypeSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = (static_cast<uint64_t>(i) * 2654435761u) ^
                       (static_cast<uint64_t>(rank + 1) * 40503u) ^
                       (static_cast<uint64_t>(salt) << 20);
    const uint64_t mixed = h * 0x9E3779B97F4A7C15ull >> 17;
    // Nonzero multiples of 0.5 in [-3, 3]: products of four stay exact even in bfloat16.
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

// op over `inputs` in rank order, then the average's division: the single-process reference.
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

Bytes Slice(const Bytes& b, DType dtype, int64_t offset, int64_t n) {
  const size_t es = DTypeSize(dtype);
  return Bytes(b.begin() + offset * es, b.begin() + (offset + n) * es);
}

// A floating element as a double (0 for other dtypes).
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

// Describes where two buffers first differ, or "" if they are equal (within one rounding of the
// dtype when `approximate`).
std::string Diff(const Bytes& got, const Bytes& want, DType dtype, bool approximate = false) {
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
    return absl::StrFormat("element %d of %d: got bits 0x%x, want 0x%x", i / es, got.size() / es, g,
                           w);
  }
  return "";
}

std::string Case(DType dtype, int64_t count) {
  return absl::StrCat(DTypeName(dtype), " count ", count);
}
std::string Case(DType dtype, ReduceOp op, int64_t count) {
  return absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op), " count ", count);
}

void ExpectAllOk(const std::vector<absl::Status>& statuses, const std::string& what) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_TRUE(statuses[r].ok()) << what << ", rank " << r << ": " << statuses[r];
  }
}

// "gloo_ranks2".
std::string TransportAndSizeName(
    const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return absl::StrCat(std::get<0>(info.param), "_ranks", std::get<1>(info.param));
}

// A transport and a group size; skips (saying why) where the transport cannot run that group.
class TransportTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    if (const std::string why = transport().Unavailable(size()); !why.empty()) GTEST_SKIP() << why;
  }
  const Transport& transport() const { return *AllTransports().at(std::get<0>(GetParam())); }
  int size() const { return std::get<1>(GetParam()); }
  std::vector<absl::Status> OnEveryRank(const std::function<absl::Status(int)>& fn) const {
    return ::tessera::comm::OnEveryRank(transport(), size(), fn);
  }
  std::unique_ptr<Buffer> Copy(const Bytes& host) const { return transport().Copy(host); }
  std::unique_ptr<Buffer> Zeros(size_t bytes) const { return transport().Copy(Bytes(bytes)); }
  // Whether op on dtype may differ from the reference by a rounding on this transport.
  bool Approximate(ReduceOp op, DType dtype) const {
    return op == ReduceOp::kAvg && IsFloatingPoint(dtype) && !transport().exact_float_average();
  }
};

// The collectives on the shared group of the transport and size.
class CommunicatorTest : public TransportTest {
 protected:
  void SetUp() override {
    TransportTest::SetUp();
    if (IsSkipped()) return;
    for (auto& c : Groups::Of(transport(), size())) {
      ASSERT_NE(c, nullptr);
      comms_.push_back(c.get());
    }
  }
  Communicator& comm(int rank) { return *comms_[rank]; }

 private:
  std::vector<Communicator*> comms_;
};

TEST_P(CommunicatorTest, AllReduceEqualsReference) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (int64_t count : kCounts) {
        std::vector<Bytes> inputs, outputs(size());
        for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, count, r, 1));
        ExpectAllOk(OnEveryRank([&](int r) {
                      auto data = Copy(inputs[r]);
                      absl::Status s = comm(r).AllReduce(data->get(), count, dtype, op);
                      outputs[r] = data->ToHost();
                      return s;
                    }),
                    Case(dtype, op, count));
        const Bytes want = Reference(op, dtype, inputs, 0, count);
        for (int r = 0; r < size(); ++r) {
          EXPECT_EQ(Diff(outputs[r], want, dtype, Approximate(op, dtype)), "")
              << Case(dtype, op, count) << ", rank " << r;
        }
      }
    }
  }
}

// Above 1 MiB Gloo's AllReduce switches from BCUBE to RING.
TEST_P(CommunicatorTest, LargeAllReduceEqualsReference) {
  const struct {
    DType dtype;
    ReduceOp op;
  } cases[] = {{DType::kFloat32, ReduceOp::kSum},
               {DType::kBFloat16, ReduceOp::kAvg},
               {DType::kInt64, ReduceOp::kProduct},
               {DType::kBool, ReduceOp::kMin}};
  for (const auto& c : cases) {
    const int64_t count = ((int64_t{3} << 20) / static_cast<int64_t>(DTypeSize(c.dtype))) + 3;
    std::vector<Bytes> inputs, outputs(size());
    for (int r = 0; r < size(); ++r) inputs.push_back(Values(c.dtype, count, r, 2));
    ExpectAllOk(OnEveryRank([&](int r) {
                  auto data = Copy(inputs[r]);
                  absl::Status s = comm(r).AllReduce(data->get(), count, c.dtype, c.op);
                  outputs[r] = data->ToHost();
                  return s;
                }),
                Case(c.dtype, c.op, count));
    const Bytes want = Reference(c.op, c.dtype, inputs, 0, count);
    for (int r = 0; r < size(); ++r) {
      EXPECT_EQ(Diff(outputs[r], want, c.dtype, Approximate(c.op, c.dtype)), "")
          << Case(c.dtype, c.op, count) << ", rank " << r;
    }
  }
}

TEST_P(CommunicatorTest, ReduceEqualsReferenceOnRootAndLeavesOthersUnchanged) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (int64_t count : kCounts) {
        const int root = static_cast<int>((count + static_cast<int>(op)) % size());
        std::vector<Bytes> inputs, outputs(size());
        for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, count, r, 3));
        ExpectAllOk(OnEveryRank([&](int r) {
                      auto data = Copy(inputs[r]);
                      absl::Status s = comm(r).Reduce(data->get(), count, dtype, op, root);
                      outputs[r] = data->ToHost();
                      return s;
                    }),
                    Case(dtype, op, count));
        for (int r = 0; r < size(); ++r) {
          const Bytes want = r == root ? Reference(op, dtype, inputs, 0, count) : inputs[r];
          EXPECT_EQ(Diff(outputs[r], want, dtype, Approximate(op, dtype)), "")
              << Case(dtype, op, count) << ", root " << root << ", rank " << r;
        }
      }
    }
  }
}

TEST_P(CommunicatorTest, ReduceScatterEqualsReferenceBlock) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (int64_t count : kCounts) {
        std::vector<Bytes> inputs, outputs(size());
        for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, size() * count, r, 4));
        ExpectAllOk(OnEveryRank([&](int r) {
                      auto send = Copy(inputs[r]);
                      auto recv = Zeros(count * DTypeSize(dtype));
                      absl::Status s =
                          comm(r).ReduceScatter(send->get(), recv->get(), count, dtype, op);
                      outputs[r] = recv->ToHost();
                      return s;
                    }),
                    Case(dtype, op, count));
        for (int r = 0; r < size(); ++r) {
          EXPECT_EQ(Diff(outputs[r], Reference(op, dtype, inputs, r * count, count), dtype,
                         Approximate(op, dtype)),
                    "")
              << Case(dtype, op, count) << ", rank " << r;
        }
      }
    }
  }
}

// Inputs of 17 MiB: large all-to-all messages, and Gloo's kept scratch buffer growing.
TEST_P(CommunicatorTest, LargeReduceScatterEqualsReferenceBlock) {
  const struct {
    DType dtype;
    ReduceOp op;
  } cases[] = {{DType::kFloat32, ReduceOp::kAvg}, {DType::kInt8, ReduceOp::kProduct}};
  for (const auto& c : cases) {
    const int64_t count =
        (int64_t{17} << 20) / (size() * static_cast<int64_t>(DTypeSize(c.dtype))) + 5;
    std::vector<Bytes> inputs, outputs(size());
    for (int r = 0; r < size(); ++r) inputs.push_back(Values(c.dtype, size() * count, r, 11));
    ExpectAllOk(OnEveryRank([&](int r) {
                  auto send = Copy(inputs[r]);
                  auto recv = Zeros(count * DTypeSize(c.dtype));
                  absl::Status s =
                      comm(r).ReduceScatter(send->get(), recv->get(), count, c.dtype, c.op);
                  outputs[r] = recv->ToHost();
                  return s;
                }),
                Case(c.dtype, c.op, count));
    for (int r = 0; r < size(); ++r) {
      EXPECT_EQ(Diff(outputs[r], Reference(c.op, c.dtype, inputs, r * count, count), c.dtype,
                     Approximate(c.op, c.dtype)),
                "")
          << Case(c.dtype, c.op, count) << ", rank " << r;
    }
  }
}

TEST_P(CommunicatorTest, BroadcastCopiesRoot) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      const int root = static_cast<int>(count % size());
      std::vector<Bytes> inputs, outputs(size());
      for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, count, r, 5));
      ExpectAllOk(OnEveryRank([&](int r) {
                    auto data = Copy(inputs[r]);
                    absl::Status s = comm(r).Broadcast(data->get(), count, dtype, root);
                    outputs[r] = data->ToHost();
                    return s;
                  }),
                  Case(dtype, count));
      for (int r = 0; r < size(); ++r) {
        EXPECT_EQ(Diff(outputs[r], inputs[root], dtype), "")
            << Case(dtype, count) << ", root " << root << ", rank " << r;
      }
    }
  }
}

TEST_P(CommunicatorTest, AllGatherConcatenatesInRankOrder) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      for (bool in_place : {false, true}) {
        const size_t block = count * DTypeSize(dtype);
        std::vector<Bytes> inputs, outputs(size());
        Bytes want;
        for (int r = 0; r < size(); ++r) {
          inputs.push_back(Values(dtype, count, r, 6));
          want.insert(want.end(), inputs[r].begin(), inputs[r].end());
        }
        ExpectAllOk(OnEveryRank([&](int r) {
                      // In place, the send block is rank r's own block of the receive buffer.
                      Bytes initial(size() * block);
                      if (in_place && block > 0)  // an empty vector's data() may be null
                        std::memcpy(initial.data() + r * block, inputs[r].data(), block);
                      auto send = Copy(inputs[r]);
                      auto recv = Copy(initial);
                      const std::byte* from = in_place ? recv->get() + r * block : send->get();
                      absl::Status s = comm(r).AllGather(from, recv->get(), count, dtype);
                      outputs[r] = recv->ToHost();
                      return s;
                    }),
                    Case(dtype, count));
        for (int r = 0; r < size(); ++r) {
          EXPECT_EQ(Diff(outputs[r], want, dtype), "")
              << Case(dtype, count) << (in_place ? " in place" : "") << ", rank " << r;
        }
      }
    }
  }
}

TEST_P(CommunicatorTest, GatherConcatenatesOnRoot) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      const int root = static_cast<int>((count + 1) % size());
      std::vector<Bytes> inputs;
      Bytes want, output;
      for (int r = 0; r < size(); ++r) {
        inputs.push_back(Values(dtype, count, r, 7));
        want.insert(want.end(), inputs[r].begin(), inputs[r].end());
      }
      ExpectAllOk(OnEveryRank([&](int r) {
                    auto send = Copy(inputs[r]);
                    auto recv = r == root ? Zeros(size() * count * DTypeSize(dtype)) : nullptr;
                    absl::Status s = comm(r).Gather(
                        send->get(), recv != nullptr ? recv->get() : nullptr, count, dtype, root);
                    if (recv != nullptr) output = recv->ToHost();
                    return s;
                  }),
                  Case(dtype, count));
      EXPECT_EQ(Diff(output, want, dtype), "") << Case(dtype, count) << ", root " << root;
    }
  }
}

TEST_P(CommunicatorTest, ScatterSendsBlockRToRankR) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      const int root = static_cast<int>((count + 2) % size());
      const Bytes input = Values(dtype, size() * count, root, 8);
      std::vector<Bytes> outputs(size());
      ExpectAllOk(OnEveryRank([&](int r) {
                    auto send = r == root ? Copy(input) : nullptr;
                    auto recv = Zeros(count * DTypeSize(dtype));
                    absl::Status s = comm(r).Scatter(send != nullptr ? send->get() : nullptr,
                                                     recv->get(), count, dtype, root);
                    outputs[r] = recv->ToHost();
                    return s;
                  }),
                  Case(dtype, count));
      for (int r = 0; r < size(); ++r) {
        EXPECT_EQ(Diff(outputs[r], Slice(input, dtype, r * count, count), dtype), "")
            << Case(dtype, count) << ", root " << root << ", rank " << r;
      }
    }
  }
}

TEST_P(CommunicatorTest, AllToAllTransposesBlocks) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      std::vector<Bytes> inputs, outputs(size());
      for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, size() * count, r, 9));
      ExpectAllOk(OnEveryRank([&](int r) {
                    auto send = Copy(inputs[r]);
                    auto recv = Zeros(size() * count * DTypeSize(dtype));
                    absl::Status s = comm(r).AllToAll(send->get(), recv->get(), count, dtype);
                    outputs[r] = recv->ToHost();
                    return s;
                  }),
                  Case(dtype, count));
      for (int r = 0; r < size(); ++r) {
        for (int from = 0; from < size(); ++from) {
          EXPECT_EQ(Diff(Slice(outputs[r], dtype, from * count, count),
                         Slice(inputs[from], dtype, r * count, count), dtype),
                    "")
              << Case(dtype, count) << ", rank " << r << " block from " << from;
        }
      }
    }
  }
}

TEST_P(CommunicatorTest, SendRecvAroundTheRing) {
  if (size() == 1) GTEST_SKIP() << "a single rank has no peer";
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      std::vector<Bytes> inputs, outputs(size());
      for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, count, r, 10));
      // NCCL ignores the tag (pairs match in issue order); Gloo matches by it.
      const uint32_t tag = static_cast<uint32_t>(count) + 17;
      ExpectAllOk(
          OnEveryRank([&](int r) {
            const int next = (r + 1) % size();
            const int prev = (r + size() - 1) % size();
            auto send_buffer = Copy(inputs[r]);
            auto recv_buffer = Zeros(count * DTypeSize(dtype));
            // Even ranks send first, odd ranks receive first: no cycle waits.
            auto send = [&] { return comm(r).Send(send_buffer->get(), count, dtype, next, tag); };
            auto recv = [&] { return comm(r).Recv(recv_buffer->get(), count, dtype, prev, tag); };
            absl::Status s = r % 2 == 0 ? send() : recv();
            if (s.ok()) s = r % 2 == 0 ? recv() : send();
            outputs[r] = recv_buffer->ToHost();
            return s;
          }),
          Case(dtype, count));
      for (int r = 0; r < size(); ++r) {
        EXPECT_EQ(Diff(outputs[r], inputs[(r + size() - 1) % size()], dtype), "")
            << Case(dtype, count) << ", rank " << r;
      }
    }
  }
}

TEST_P(CommunicatorTest, BarrierWaitsForTheLastRank) {
  const absl::Duration delay = absl::Milliseconds(200);
  std::vector<absl::Time> left(size());
  const absl::Time start = absl::Now();
  ExpectAllOk(OnEveryRank([&](int r) {
                if (r == size() - 1) absl::SleepFor(delay);
                absl::Status s = comm(r).Barrier();
                left[r] = absl::Now();
                return s;
              }),
              "Barrier");
  for (int r = 0; r < size(); ++r) EXPECT_GE(left[r] - start, delay) << "rank " << r;
}

// Argument checks run before anything is sent, so one rank can be probed alone.
TEST_P(CommunicatorTest, BadArgumentsAreInvalidAndLeaveTheCommunicatorUsable) {
  Communicator& c = comm(0);
  auto buffer_a = Zeros(16 * sizeof(float)), buffer_b = Zeros(16 * sizeof(float));
  auto* a = reinterpret_cast<float*>(buffer_a->get());
  auto* b = reinterpret_cast<float*>(buffer_b->get());
  const auto f32 = DType::kFloat32;
  const int n = size();
  auto expect_invalid = [&](absl::Status s, const std::string& text) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(text));
  };
  expect_invalid(c.Broadcast(a, 4, f32, n),
                 absl::StrCat("root ", n, " is out of range for a group of ", n, " ranks"));
  expect_invalid(c.Reduce(a, 4, f32, ReduceOp::kSum, -1), "root -1 is out of range");
  expect_invalid(c.Gather(a, b, 1, f32, n + 3), absl::StrCat("root ", n + 3, " is out of range"));
  expect_invalid(c.Scatter(a, b, 1, f32, n), absl::StrCat("root ", n, " is out of range"));
  expect_invalid(c.Send(a, 4, f32, 0, 0), "peer 0 is this rank");
  expect_invalid(c.Recv(a, 4, f32, n + 5, 0), absl::StrCat("peer ", n + 5, " is out of range"));
  expect_invalid(c.AllReduce(a, -1, f32, ReduceOp::kSum), "count -1 is negative");
  expect_invalid(c.AllReduce(nullptr, 4, f32, ReduceOp::kSum), "data buffer is null");
  expect_invalid(c.AllReduce(a, 4, static_cast<DType>(42), ReduceOp::kSum),
                 "dtype 42 is not a valid dtype");
  expect_invalid(c.AllReduce(a, 4, f32, static_cast<ReduceOp>(9)), "reduce op 9");
  expect_invalid(c.AllGather(a + 1, a, 2, f32), "overlap");
  expect_invalid(c.AllToAll(a, a + 1, 2, f32), "overlap");
  expect_invalid(c.ReduceScatter(a, b, int64_t{1} << 62, f32, ReduceOp::kSum), "overflows");
  expect_invalid(c.Barrier(absl::ZeroDuration()), "timeout 0 must be positive");
  expect_invalid(c.set_timeout(-absl::Seconds(1)), "must be positive");
  EXPECT_TRUE(c.Health().ok()) << c.Health();
  // Count 0 is a no-op even with null buffers.
  EXPECT_TRUE(c.AllReduce(nullptr, 0, f32, ReduceOp::kSum).ok());
}

TEST_P(CommunicatorTest, GroupStaysHealthy) {
  for (int r = 0; r < size(); ++r) {
    EXPECT_TRUE(comm(r).Health().ok()) << comm(r).Health();
    EXPECT_EQ(comm(r).rank(), r);
    EXPECT_EQ(comm(r).size(), size());
    EXPECT_EQ(comm(r).backend(), transport().name());
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, CommunicatorTest,
                         ::testing::Combine(::testing::ValuesIn(Transports()),
                                            ::testing::Values(1, 2, 3, 4)),
                         TransportAndSizeName);

// A group of `size` ranks whose last rank never joins a collective: the others give up within the
// call's timeout, and their communicators stay broken.
class MissingRankTest : public TransportTest {};

TEST_P(MissingRankTest, TimesOutAndBreaksTheGroup) {
  const int callers = size() - 1;
  auto comms = Connect(transport(), size(),
                       absl::StrCat("timeout/allreduce/", transport().name(), "/", size()),
                       absl::Seconds(5));  // the idle rank's teardown waits at most this long
  ASSERT_EQ(comms.size(), static_cast<size_t>(size()));
  for (const auto& c : comms) ASSERT_NE(c, nullptr);
  const absl::Duration timeout = absl::Milliseconds(500);
  const Bytes data = Values(DType::kFloat32, 64, 0, 12);
  std::vector<absl::Duration> took(callers);
  const auto statuses = ::tessera::comm::OnEveryRank(transport(), callers, [&](int r) {
    auto mine = Copy(data);
    const absl::Time start = absl::Now();
    absl::Status s = comms[r]->AllReduce(mine->get(), 64, DType::kFloat32, ReduceOp::kSum, timeout);
    took[r] = absl::Now() - start;
    return s;
  });
  bool any_deadline = false;
  for (int r = 0; r < callers; ++r) {
    EXPECT_THAT(statuses[r].code(),
                AnyOf(absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kUnavailable))
        << statuses[r];
    any_deadline = any_deadline || absl::IsDeadlineExceeded(statuses[r]);
    EXPECT_LT(took[r], timeout + transport().failure_slack()) << "rank " << r;
    const absl::Status health = comms[r]->Health();
    EXPECT_EQ(health.code(), absl::StatusCode::kFailedPrecondition) << health;
    EXPECT_THAT(health.message(), HasSubstr("broken"));
    EXPECT_THAT(health.message(), HasSubstr("AllReduce"));
    const absl::Status later = comms[r]->Barrier();
    EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
    EXPECT_THAT(later.message(), HasSubstr(std::string(statuses[r].message())));
  }
  // The first rank to give up reports the timeout; it closes its connections, so another may see
  // its peer gone first.
  EXPECT_TRUE(any_deadline) << "no rank reported DEADLINE_EXCEEDED";
}

// Two ranks: a lone caller, where only the timeout can end the call; three: two callers.
INSTANTIATE_TEST_SUITE_P(Transports, MissingRankTest,
                         ::testing::Combine(::testing::ValuesIn(Transports()),
                                            ::testing::Values(2, 3)),
                         TransportAndSizeName);

// One transport; the group sizes a test needs are its own.
class TransportOnlyTest : public ::testing::TestWithParam<std::string> {
 protected:
  const Transport& transport() const { return *AllTransports().at(GetParam()); }
};

TEST_P(TransportOnlyTest, UnmatchedSendTimesOutWithTheCommunicatorTimeout) {
  if (const std::string why = transport().Unavailable(2); !why.empty()) GTEST_SKIP() << why;
  // A short creation timeout: an idle NCCL rank's teardown waits at most this long.
  const absl::Duration created = absl::Seconds(5), timeout = absl::Milliseconds(400);
  auto comms = Connect(transport(), 2, absl::StrCat("timeout/send/", transport().name()), created);
  ASSERT_EQ(comms.size(), 2u);
  for (const auto& c : comms) ASSERT_NE(c, nullptr);
  EXPECT_EQ(comms[1]->timeout(), created);
  ASSERT_TRUE(comms[0]->set_timeout(timeout).ok());
  EXPECT_EQ(comms[0]->timeout(), timeout);
  absl::Status s;
  absl::Duration took;
  ::tessera::comm::OnEveryRank(transport(), 1, [&](int) {
    auto value = transport().Copy(Values(DType::kInt32, 1, 0, 13));
    const absl::Time start = absl::Now();
    s = comms[0]->Send(value->get(), 1, DType::kInt32, 1, 3);
    took = absl::Now() - start;
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(took, timeout + transport().failure_slack());
  EXPECT_EQ(comms[0]->Health().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(TransportOnlyTest, RendezvousWithoutPeersTimesOut) {
  if (const std::string why = transport().Unavailable(1); !why.empty()) GTEST_SKIP() << why;
  const absl::Duration timeout = absl::Seconds(1);
  absl::Status s;
  absl::Duration took;
  ::tessera::comm::OnEveryRank(transport(), 1, [&](int) {
    const absl::Time start = absl::Now();
    s = Create(transport(), absl::StrCat("lonely/", transport().name()), 0, 2, timeout).status();
    took = absl::Now() - start;
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(took, timeout + transport().failure_slack());
}

// Checked before any device is touched: runs on every transport, GPU or not.
TEST_P(TransportOnlyTest, CreateRejectsBadSettings) {
  const std::string prefix = absl::StrCat("bad/", transport().name());
  EXPECT_EQ(Create(transport(), prefix, 2, 2, absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Create(transport(), "", 0, 1, absl::Seconds(5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Create(transport(), prefix, 0, 1, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportOnlyTest, ::testing::ValuesIn(Transports()),
                         [](const auto& info) { return info.param; });

// How rank 0 breaks its communicator in BrokenRankTest, on an I/O error from the gone last rank: a
// receive from it, or a send to it.
enum class Breaker { kRecvFromGoneRank, kSendToGoneRank };

// Gloo only (NCCL has no connections of its own to close): a group whose last rank is gone (a
// killed worker: its sockets closed) and whose rank 0 breaks its communicator on that, while every
// other rank waits on rank 0 with a long timeout. Rank 0 closes its connections when it breaks, so
// they fail at once, not at their own timeout (before, a worker of a mesh with a dead member waited
// out a whole Gloo timeout on a peer that had already failed and moved on, and reached its next
// mesh's collectives that much later than its peers, which then timed out waiting for it).
class BrokenRankTest : public ::testing::TestWithParam<std::tuple<int, Breaker>> {};

TEST_P(BrokenRankTest, PeersWaitingOnABrokenRankFailAtOnce) {
  const auto [size, breaker] = GetParam();
  const Transport& gloo = *AllTransports().at("gloo");
  auto comms = Connect(gloo, size, absl::StrCat("broken/", size, "/", static_cast<int>(breaker)),
                       absl::Seconds(5));
  ASSERT_EQ(comms.size(), static_cast<size_t>(size));
  for (const auto& c : comms) ASSERT_NE(c, nullptr);
  constexpr absl::Duration kWaiterTimeout = absl::Seconds(30);
  const int gone = size - 1;
  comms[gone].reset();
  std::vector<absl::Duration> took(gone);
  const auto statuses = OnEveryRank(gloo, gone, [&](int r) {
    auto value = gloo.Copy(Values(DType::kInt32, 16, r, 21));
    const absl::Time start = absl::Now();
    absl::Status s;
    if (r > 0) {
      s = comms[r]->Recv(value->get(), 16, DType::kInt32, 0, 5, kWaiterTimeout);
    } else if (breaker == Breaker::kRecvFromGoneRank) {
      s = comms[0]->Recv(value->get(), 16, DType::kInt32, gone, 5, kWaiterTimeout);
    } else {
      s = comms[0]->Send(value->get(), 16, DType::kInt32, gone, 5, kWaiterTimeout);
    }
    took[r] = absl::Now() - start;
    return s;
  });
  for (int r = 0; r < gone; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kUnavailable)
        << "rank " << r << ": " << statuses[r];
    EXPECT_LT(took[r], gloo.failure_slack()) << "rank " << r;
    EXPECT_EQ(comms[r]->Health().code(), absl::StatusCode::kFailedPrecondition) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(SizesAndBreakers, BrokenRankTest,
                         ::testing::Combine(::testing::Values(3, 4),
                                            ::testing::Values(Breaker::kRecvFromGoneRank,
                                                              Breaker::kSendToGoneRank)),
                         [](const auto& info) {
                           return absl::StrCat("ranks", std::get<0>(info.param),
                                               std::get<1>(info.param) == Breaker::kRecvFromGoneRank
                                                   ? "_recv_from_gone"
                                                   : "_send_to_gone");
                         });

// Gloo only: the host to bind is Gloo's setting; NCCL picks its own network.
TEST(GlooCommunicatorTest, CreateRejectsAnUnresolvableHost) {
  CommunicatorOptions options;
  options.hostname = "no-such-host.invalid";
  auto bad_host = MakeCommunicator("cpu", Store(), "bad-host", 0, 1, options);
  EXPECT_EQ(bad_host.status().code(), absl::StatusCode::kInvalidArgument) << bad_host.status();
  EXPECT_THAT(bad_host.status().message(), HasSubstr("no-such-host.invalid"));
}

// Gloo only: a write to a peer that closed its connection raises SIGPIPE, whose default action ends
// the process (this test binary, an embedded cluster) without a word; a Gloo communicator ignores
// it unless the program chose its own handling. Each case runs in a fresh process (death tests in
// the "threadsafe" style re-execute the binary), where no communicator has been made yet.
volatile sig_atomic_t broken_pipes_seen = 0;
void CountBrokenPipe(int) { broken_pipes_seen = broken_pipes_seen + 1; }

int RaiseSigpipeAfterCreate() {
  CommunicatorOptions options;
  auto comm = MakeCommunicator("cpu", Store(), "sigpipe", 0, 1, options);
  if (!comm.ok()) return 2;
  raise(SIGPIPE);
  return 0;
}

TEST(GlooCommunicatorDeathTest, ASigpipeDoesNotEndTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(RaiseSigpipeAfterCreate()), ::testing::ExitedWithCode(0), "");
}

TEST(GlooCommunicatorDeathTest, AHandlerOfTheProgramsOwnIsKept) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        signal(SIGPIPE, CountBrokenPipe);
        const int created = RaiseSigpipeAfterCreate();
        std::exit(created != 0 ? created : broken_pipes_seen == 1 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(MakeCommunicatorTest, ChoosesTheBackendByDeviceType) {
  CommunicatorOptions options;
  auto cpu = MakeCommunicator("cpu", Store(), "factory/cpu", 0, 1, options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->backend(), "gloo");
  EXPECT_EQ(MakeCommunicator("tpu", Store(), "factory/tpu", 0, 1, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCommunicator("cuda:x", Store(), "factory/cudax", 0, 1, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  if (!HaveNccl()) {
    const auto cuda = MakeCommunicator("cuda", Store(), "factory/cuda", 0, 1, options);
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition) << cuda.status();
  }
}

#if TESSERA_COMM_WITH_NCCL

// NCCL only: Gloo needs no device, so it has no such failure.
TEST(NcclCommunicatorTest, WithoutAGpuCreateIsFailedPrecondition) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    GTEST_SKIP() << "this machine has a GPU";
  }
  CommunicatorOptions options;
  auto comm = MakeCommunicator("cuda", Store(), "no-gpu", 0, 1, options);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition) << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("no CUDA device"));
  auto numbered = MakeCommunicator("cuda:0", Store(), "no-gpu-numbered", 0, 1, options);
  EXPECT_EQ(numbered.status().code(), absl::StatusCode::kFailedPrecondition) << numbered.status();
}

#else  // !TESSERA_COMM_WITH_NCCL

TEST(NcclCommunicatorTest, NotBuilt) {
  GTEST_SKIP() << "this build has no CUDA (TESSERA_WITH_CUDA is off): the NCCL transport is not "
                  "compiled";
}

#endif  // TESSERA_COMM_WITH_NCCL

}  // namespace
}  // namespace tessera::comm

// GlooCommunicator on groups of 1 to 4 ranks run as threads of this process over loopback TCP.
// Every collective, dtype and reduce op is compared byte for byte with a single-process reference
// computed with core's ReduceInto and DivideInPlace. Inputs are chosen so that the order of a
// reduction cannot change the result: integers wrap (modular arithmetic is associative), floats are
// nonzero multiples of 0.5 small enough to add and multiply exactly.

#include "worker/comm/gloo_communicator.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
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
#include "gtest/gtest.h"
#include "worker/comm/make_communicator.h"

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

// Runs fn(rank) on one thread per rank and returns each rank's result.
std::vector<absl::Status> OnEveryRank(int size, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { results[r] = fn(r); });
  for (auto& t : threads) t.join();
  return results;
}

// Connects a fresh group of `size` ranks under `prefix`.
std::vector<std::unique_ptr<Communicator>> Connect(int size, const std::string& prefix,
                                                   absl::Duration timeout = absl::Seconds(30)) {
  std::vector<std::unique_ptr<Communicator>> comms(size);
  CommunicatorOptions options;
  options.timeout = timeout;
  const auto statuses = OnEveryRank(size, [&](int r) {
    auto comm = MakeCommunicator("cpu", Store(), prefix, r, size, options);
    if (!comm.ok()) return comm.status();
    comms[r] = std::move(*comm);
    return absl::OkStatus();
  });
  for (const auto& s : statuses) EXPECT_TRUE(s.ok()) << s;
  return comms;
}

// The groups the collective tests share: one per size, connected on first use from a test's main
// thread, once per process (Gloo contexts are costly to create), and closed when the tests end.
class Groups : public ::testing::Environment {
 public:
  static std::vector<std::unique_ptr<Communicator>>& Of(int size) {
    auto& group = groups_[size];
    if (group.empty()) group = Connect(size, absl::StrCat("shared/", size));
    return group;
  }
  void TearDown() override { groups_.clear(); }

 private:
  static inline std::map<int, std::vector<std::unique_ptr<Communicator>>> groups_;
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

// Describes where two buffers first differ, or "" if they are equal.
std::string Diff(const Bytes& got, const Bytes& want, DType dtype) {
  if (got.size() != want.size()) return absl::StrCat("size ", got.size(), " != ", want.size());
  const size_t es = DTypeSize(dtype);
  for (size_t i = 0; i < got.size(); i += es) {
    if (std::memcmp(&got[i], &want[i], es) != 0) {
      uint64_t g = 0, w = 0;
      std::memcpy(&g, &got[i], es);
      std::memcpy(&w, &want[i], es);
      return absl::StrFormat("element %d of %d: got bits 0x%x, want 0x%x", i / es, got.size() / es,
                             g, w);
    }
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

class GlooCollectiveTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    for (auto& c : Groups::Of(size())) {
      ASSERT_NE(c, nullptr);
      comms_.push_back(c.get());
    }
  }
  int size() const { return GetParam(); }
  Communicator& comm(int rank) { return *comms_[rank]; }

 private:
  std::vector<Communicator*> comms_;
};

TEST_P(GlooCollectiveTest, AllReduceEqualsReference) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (int64_t count : kCounts) {
        std::vector<Bytes> inputs, data;
        for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, count, r, 1));
        data = inputs;
        ExpectAllOk(
            OnEveryRank(size(),
                        [&](int r) { return comm(r).AllReduce(data[r].data(), count, dtype, op); }),
            Case(dtype, op, count));
        const Bytes want = Reference(op, dtype, inputs, 0, count);
        for (int r = 0; r < size(); ++r) {
          EXPECT_EQ(Diff(data[r], want, dtype), "") << Case(dtype, op, count) << ", rank " << r;
        }
      }
    }
  }
}

// Above 1 MiB AllReduce switches from BCUBE to RING.
TEST_P(GlooCollectiveTest, LargeAllReduceEqualsReference) {
  const struct {
    DType dtype;
    ReduceOp op;
  } cases[] = {{DType::kFloat32, ReduceOp::kSum},
               {DType::kBFloat16, ReduceOp::kAvg},
               {DType::kInt64, ReduceOp::kProduct},
               {DType::kBool, ReduceOp::kMin}};
  for (const auto& c : cases) {
    const int64_t count = ((int64_t{3} << 20) / static_cast<int64_t>(DTypeSize(c.dtype))) + 3;
    std::vector<Bytes> inputs, data;
    for (int r = 0; r < size(); ++r) inputs.push_back(Values(c.dtype, count, r, 2));
    data = inputs;
    ExpectAllOk(
        OnEveryRank(size(),
                    [&](int r) { return comm(r).AllReduce(data[r].data(), count, c.dtype, c.op); }),
        Case(c.dtype, c.op, count));
    const Bytes want = Reference(c.op, c.dtype, inputs, 0, count);
    for (int r = 0; r < size(); ++r) {
      EXPECT_EQ(Diff(data[r], want, c.dtype), "") << Case(c.dtype, c.op, count) << ", rank " << r;
    }
  }
}

TEST_P(GlooCollectiveTest, ReduceEqualsReferenceOnRootAndLeavesOthersUnchanged) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (int64_t count : kCounts) {
        const int root = static_cast<int>((count + static_cast<int>(op)) % size());
        std::vector<Bytes> inputs, data;
        for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, count, r, 3));
        data = inputs;
        ExpectAllOk(OnEveryRank(size(),
                                [&](int r) {
                                  return comm(r).Reduce(data[r].data(), count, dtype, op, root);
                                }),
                    Case(dtype, op, count));
        for (int r = 0; r < size(); ++r) {
          const Bytes want = r == root ? Reference(op, dtype, inputs, 0, count) : inputs[r];
          EXPECT_EQ(Diff(data[r], want, dtype), "")
              << Case(dtype, op, count) << ", root " << root << ", rank " << r;
        }
      }
    }
  }
}

TEST_P(GlooCollectiveTest, ReduceScatterEqualsReferenceBlock) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (int64_t count : kCounts) {
        std::vector<Bytes> inputs, outputs(size(), Bytes(count * DTypeSize(dtype)));
        for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, size() * count, r, 4));
        ExpectAllOk(OnEveryRank(size(),
                                [&](int r) {
                                  return comm(r).ReduceScatter(inputs[r].data(), outputs[r].data(),
                                                               count, dtype, op);
                                }),
                    Case(dtype, op, count));
        for (int r = 0; r < size(); ++r) {
          EXPECT_EQ(Diff(outputs[r], Reference(op, dtype, inputs, r * count, count), dtype), "")
              << Case(dtype, op, count) << ", rank " << r;
        }
      }
    }
  }
}

// Inputs of 17 MiB: large all-to-all messages, and the kept scratch buffer growing.
TEST_P(GlooCollectiveTest, LargeReduceScatterEqualsReferenceBlock) {
  const struct {
    DType dtype;
    ReduceOp op;
  } cases[] = {{DType::kFloat32, ReduceOp::kAvg}, {DType::kInt8, ReduceOp::kProduct}};
  for (const auto& c : cases) {
    const int64_t count =
        (int64_t{17} << 20) / (size() * static_cast<int64_t>(DTypeSize(c.dtype))) + 5;
    std::vector<Bytes> inputs, outputs(size(), Bytes(count * DTypeSize(c.dtype)));
    for (int r = 0; r < size(); ++r) inputs.push_back(Values(c.dtype, size() * count, r, 11));
    ExpectAllOk(OnEveryRank(size(),
                            [&](int r) {
                              return comm(r).ReduceScatter(inputs[r].data(), outputs[r].data(),
                                                           count, c.dtype, c.op);
                            }),
                Case(c.dtype, c.op, count));
    for (int r = 0; r < size(); ++r) {
      EXPECT_EQ(Diff(outputs[r], Reference(c.op, c.dtype, inputs, r * count, count), c.dtype), "")
          << Case(c.dtype, c.op, count) << ", rank " << r;
    }
  }
}

TEST_P(GlooCollectiveTest, BroadcastCopiesRoot) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      const int root = static_cast<int>(count % size());
      std::vector<Bytes> data;
      for (int r = 0; r < size(); ++r) data.push_back(Values(dtype, count, r, 5));
      const Bytes want = data[root];
      ExpectAllOk(
          OnEveryRank(size(),
                      [&](int r) { return comm(r).Broadcast(data[r].data(), count, dtype, root); }),
          Case(dtype, count));
      for (int r = 0; r < size(); ++r) {
        EXPECT_EQ(Diff(data[r], want, dtype), "") << Case(dtype, count) << ", rank " << r;
      }
    }
  }
}

TEST_P(GlooCollectiveTest, AllGatherConcatenatesInRankOrder) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      for (bool in_place : {false, true}) {
        const size_t block = count * DTypeSize(dtype);
        std::vector<Bytes> inputs, outputs(size(), Bytes(size() * block));
        Bytes want;
        for (int r = 0; r < size(); ++r) {
          inputs.push_back(Values(dtype, count, r, 6));
          want.insert(want.end(), inputs[r].begin(), inputs[r].end());
          if (in_place) std::memcpy(outputs[r].data() + r * block, inputs[r].data(), block);
        }
        ExpectAllOk(OnEveryRank(size(),
                                [&](int r) {
                                  const void* send =
                                      in_place ? outputs[r].data() + r * block : inputs[r].data();
                                  return comm(r).AllGather(send, outputs[r].data(), count, dtype);
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

TEST_P(GlooCollectiveTest, GatherConcatenatesOnRoot) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      const int root = static_cast<int>((count + 1) % size());
      std::vector<Bytes> inputs;
      Bytes want, output(size() * count * DTypeSize(dtype));
      for (int r = 0; r < size(); ++r) {
        inputs.push_back(Values(dtype, count, r, 7));
        want.insert(want.end(), inputs[r].begin(), inputs[r].end());
      }
      ExpectAllOk(OnEveryRank(size(),
                              [&](int r) {
                                return comm(r).Gather(inputs[r].data(),
                                                      r == root ? output.data() : nullptr, count,
                                                      dtype, root);
                              }),
                  Case(dtype, count));
      EXPECT_EQ(Diff(output, want, dtype), "") << Case(dtype, count) << ", root " << root;
    }
  }
}

TEST_P(GlooCollectiveTest, ScatterSendsBlockRToRankR) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      const int root = static_cast<int>((count + 2) % size());
      const Bytes input = Values(dtype, size() * count, root, 8);
      std::vector<Bytes> outputs(size(), Bytes(count * DTypeSize(dtype)));
      ExpectAllOk(OnEveryRank(size(),
                              [&](int r) {
                                return comm(r).Scatter(r == root ? input.data() : nullptr,
                                                       outputs[r].data(), count, dtype, root);
                              }),
                  Case(dtype, count));
      for (int r = 0; r < size(); ++r) {
        EXPECT_EQ(Diff(outputs[r], Slice(input, dtype, r * count, count), dtype), "")
            << Case(dtype, count) << ", root " << root << ", rank " << r;
      }
    }
  }
}

TEST_P(GlooCollectiveTest, AllToAllTransposesBlocks) {
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      std::vector<Bytes> inputs, outputs(size(), Bytes(size() * count * DTypeSize(dtype)));
      for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, size() * count, r, 9));
      ExpectAllOk(OnEveryRank(size(),
                              [&](int r) {
                                return comm(r).AllToAll(inputs[r].data(), outputs[r].data(), count,
                                                        dtype);
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

TEST_P(GlooCollectiveTest, SendRecvAroundTheRing) {
  if (size() == 1) GTEST_SKIP() << "a single rank has no peer";
  for (DType dtype : kAllDTypes) {
    for (int64_t count : kCounts) {
      std::vector<Bytes> inputs, outputs(size(), Bytes(count * DTypeSize(dtype)));
      for (int r = 0; r < size(); ++r) inputs.push_back(Values(dtype, count, r, 10));
      const uint32_t tag = static_cast<uint32_t>(count) + 17;
      ExpectAllOk(OnEveryRank(size(),
                              [&](int r) {
                                const int next = (r + 1) % size();
                                const int prev = (r + size() - 1) % size();
                                // Even ranks send first, odd ranks receive first: no cycle waits.
                                auto send = [&] {
                                  return comm(r).Send(inputs[r].data(), count, dtype, next, tag);
                                };
                                auto recv = [&] {
                                  return comm(r).Recv(outputs[r].data(), count, dtype, prev, tag);
                                };
                                absl::Status first = r % 2 == 0 ? send() : recv();
                                if (!first.ok()) return first;
                                return r % 2 == 0 ? recv() : send();
                              }),
                  Case(dtype, count));
      for (int r = 0; r < size(); ++r) {
        EXPECT_EQ(Diff(outputs[r], inputs[(r + size() - 1) % size()], dtype), "")
            << Case(dtype, count) << ", rank " << r;
      }
    }
  }
}

TEST_P(GlooCollectiveTest, BarrierWaitsForTheLastRank) {
  const absl::Duration delay = absl::Milliseconds(200);
  std::vector<absl::Time> left(size());
  const absl::Time start = absl::Now();
  ExpectAllOk(OnEveryRank(size(),
                          [&](int r) {
                            if (r == size() - 1) absl::SleepFor(delay);
                            absl::Status s = comm(r).Barrier();
                            left[r] = absl::Now();
                            return s;
                          }),
              "Barrier");
  for (int r = 0; r < size(); ++r) EXPECT_GE(left[r] - start, delay) << "rank " << r;
}

TEST_P(GlooCollectiveTest, GroupStaysHealthy) {
  for (int r = 0; r < size(); ++r) {
    EXPECT_TRUE(comm(r).Health().ok()) << comm(r).Health();
    EXPECT_EQ(comm(r).rank(), r);
    EXPECT_EQ(comm(r).size(), size());
    EXPECT_EQ(comm(r).backend(), "gloo");
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, GlooCollectiveTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return absl::StrCat("ranks", info.param); });

// Argument checks run before anything is sent, so one rank can be probed alone.
TEST(GlooCommunicatorTest, BadArgumentsAreInvalidAndLeaveTheCommunicatorUsable) {
  auto& group = Groups::Of(2);
  ASSERT_NE(group[0], nullptr);
  Communicator& c = *group[0];
  float a[8] = {}, b[8] = {};
  const auto f32 = DType::kFloat32;
  auto expect_invalid = [&](absl::Status s, absl::string_view text) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr(text));
  };
  expect_invalid(c.Broadcast(a, 4, f32, 2), "root 2 is out of range for a group of 2 ranks");
  expect_invalid(c.Reduce(a, 4, f32, ReduceOp::kSum, -1), "root -1 is out of range");
  expect_invalid(c.Gather(a, b, 1, f32, 5), "root 5 is out of range");
  expect_invalid(c.Scatter(a, b, 1, f32, 2), "root 2 is out of range");
  expect_invalid(c.Send(a, 4, f32, 0, 0), "peer 0 is this rank");
  expect_invalid(c.Recv(a, 4, f32, 7, 0), "peer 7 is out of range");
  expect_invalid(c.AllReduce(a, -1, f32, ReduceOp::kSum), "count -1 is negative");
  expect_invalid(c.AllReduce(nullptr, 4, f32, ReduceOp::kSum), "data buffer is null");
  expect_invalid(c.AllReduce(a, 4, static_cast<DType>(42), ReduceOp::kSum),
                 "dtype 42 is not a valid dtype");
  expect_invalid(c.AllReduce(a, 4, f32, static_cast<ReduceOp>(9)), "reduce op 9");
  expect_invalid(c.AllGather(a + 1, a, 2, f32), "overlap");
  expect_invalid(c.AllToAll(a, a + 2, 2, f32), "overlap");
  expect_invalid(c.ReduceScatter(a, b, int64_t{1} << 62, f32, ReduceOp::kSum), "overflows");
  expect_invalid(c.Barrier(absl::ZeroDuration()), "timeout 0 must be positive");
  expect_invalid(c.set_timeout(-absl::Seconds(1)), "must be positive");
  EXPECT_TRUE(c.Health().ok()) << c.Health();
  // Count 0 is a no-op even with null buffers.
  EXPECT_TRUE(c.AllReduce(nullptr, 0, f32, ReduceOp::kSum).ok());
}

TEST(GlooCommunicatorTest, MissingRankTimesOutAndBreaksTheGroup) {
  auto comms = Connect(3, "timeout/allreduce");
  ASSERT_EQ(comms.size(), 3u);
  const absl::Duration timeout = absl::Milliseconds(500);
  std::vector<absl::Duration> took(3);
  std::vector<float> data(64, 1.0f);
  // Rank 2 never joins: the others must give up within the per-call timeout.
  const auto statuses = OnEveryRank(2, [&](int r) {
    std::vector<float> mine = data;
    const absl::Time start = absl::Now();
    absl::Status s = comms[r]->AllReduce(mine.data(), 64, DType::kFloat32, ReduceOp::kSum, timeout);
    took[r] = absl::Now() - start;
    return s;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(statuses[r].code(),
                AnyOf(absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kUnavailable))
        << statuses[r];
    EXPECT_LT(took[r], timeout + absl::Seconds(2)) << "rank " << r;
    const absl::Status health = comms[r]->Health();
    EXPECT_EQ(health.code(), absl::StatusCode::kFailedPrecondition) << health;
    EXPECT_THAT(health.message(), HasSubstr("broken"));
    EXPECT_THAT(health.message(), HasSubstr("AllReduce"));
    const absl::Status later = comms[r]->Barrier();
    EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition) << later;
    EXPECT_THAT(later.message(), HasSubstr(std::string(statuses[r].message())));
  }
  // The first rank to give up reports the timeout; it closes its connections, so the other may
  // see its peer gone first.
  EXPECT_TRUE(absl::IsDeadlineExceeded(statuses[0]) || absl::IsDeadlineExceeded(statuses[1]))
      << statuses[0] << "; " << statuses[1];
}

TEST(GlooCommunicatorTest, UnmatchedSendTimesOutWithTheCommunicatorTimeout) {
  auto comms = Connect(2, "timeout/send", absl::Milliseconds(400));
  ASSERT_EQ(comms.size(), 2u);
  int32_t value = 7;
  const absl::Time start = absl::Now();
  const absl::Status s = comms[0]->Send(&value, 1, DType::kInt32, 1, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(comms[0]->Health().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GlooCommunicatorTest, RendezvousWithoutPeersTimesOut) {
  GlooCommunicatorOptions options;
  options.timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  auto comm = GlooCommunicator::Create(Store(), "lonely", 0, 2, options);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(GlooCommunicatorTest, CreateRejectsBadSettings) {
  GlooCommunicatorOptions options;
  EXPECT_EQ(GlooCommunicator::Create(Store(), "bad", 2, 2, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GlooCommunicator::Create(Store(), "", 0, 1, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.hostname = "no-such-host.invalid";
  auto bad_host = GlooCommunicator::Create(Store(), "bad-host", 0, 1, options);
  EXPECT_EQ(bad_host.status().code(), absl::StatusCode::kInvalidArgument) << bad_host.status();
  EXPECT_THAT(bad_host.status().message(), HasSubstr("no-such-host.invalid"));
  options = {};
  options.timeout = absl::ZeroDuration();
  EXPECT_EQ(GlooCommunicator::Create(Store(), "bad-timeout", 0, 1, options).status().code(),
            absl::StatusCode::kInvalidArgument);
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

}  // namespace
}  // namespace tessera::comm

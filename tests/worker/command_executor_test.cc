// Workers' command executors (one thread each, real communicators in this process) on
// TestDevice() (tests/support/test_device.h): on cpu each over a StrictMemoryBackend (host memory
// used as a GPU's is, every pointer checked to be its own) with Gloo, on cuda position p on cuda:p
// with NCCL.
//
// Where one rank cannot do its part: a SpreadTensor whose source shard is missing or the wrong
// shape, or whose shard is over the rank's budget, and a collective on local tensors whose output
// or scratch buffer is over the rank's budget. The failing rank still takes part in the
// collectives with a stand-in and reports its failure afterwards, so no peer is stranded (every
// rank returns well before the communicators' timeout), the other ranks hold what the collective
// gave them, and a collective on the mesh works afterwards.
//
// Where a communicator breaks (a rank alone in a collective times out): every command on the mesh
// reports it in CommandReply.broken, and a SetupMesh of the next generation re-forms the mesh's
// communicators so that collectives work again.

#include "worker/command_executor.h"

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/small_integer_tensor.h"
#include "gloo/rendezvous/hash_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/test_device.h"
#include "worker/shard_store.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMeshId = 7;
constexpr absl::Duration kTimeout = absl::Seconds(5);
constexpr int64_t kBudget = int64_t{1} << 20;
constexpr int64_t kTightBudget = 1000;  // the failing rank's, when it fails for its budget
const Shape kShape = {64, 33};          // float32: 8448 bytes

// Equal dtype, shape and bytes.
bool SameTensor(const HostTensor& a, const HostTensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

std::string MeshName(const Shape& mesh) {
  std::string name;
  for (int64_t d : mesh) name += absl::StrCat(d, "x");
  name.pop_back();
  return name;
}

// One worker's executor and store, as tessera-worker holds them.
struct Worker {
  Worker(int64_t id, int64_t budget, gloo::rendezvous::Store* rendezvous, kernels::KernelBackend* k)
      : store(budget, *k), executor(id, k, &store, rendezvous, "127.0.0.1") {}
  ShardStore store;
  CommandExecutor executor;
};

// What one worker's Execute returned.
struct Outcome {
  absl::Status status;
  v1::CommandReply reply;
  bool ok() const { return status.ok(); }
};

// Workers 0..n-1 of a mesh whose communicators are set up, each rank's budget given.
class ExecutorMesh {
 public:
  // Runs command(position) on the workers at `positions` (every worker if empty) at once; returns
  // each one's outcome, by position.
  std::vector<Outcome> OnEveryWorker(const std::function<v1::Command(int64_t)>& command,
                                     std::vector<int64_t> positions = {}) {
    if (positions.empty()) {
      for (size_t p = 0; p < workers_.size(); ++p) positions.push_back(static_cast<int64_t>(p));
    }
    std::vector<Outcome> results(workers_.size(), Outcome{absl::UnknownError("not run"), {}});
    std::vector<std::thread> threads;
    for (int64_t p : positions) {
      threads.emplace_back([&, p] {
        results[p].status = workers_[p]->executor.Execute(command(p), &results[p].reply);
      });
    }
    for (std::thread& t : threads) t.join();
    return results;
  }

  // Starts one worker per rank of `mesh` (position p's budget is budgets[p]) and sets the mesh up
  // with collectives that time out after `timeout`.
  ::testing::AssertionResult Start(const DeviceMesh& mesh, const std::vector<int64_t>& budgets,
                                   absl::Duration timeout = kTimeout) {
    mesh_ = std::make_unique<DeviceMesh>(mesh);
    timeout_ = timeout;
    for (int64_t p = 0; p < mesh.size(); ++p) {
      absl::StatusOr<std::unique_ptr<kernels::KernelBackend>> made = testing::TestBackendForRank(p);
      if (!made.ok()) {
        return ::testing::AssertionFailure()
               << "position " << p << " on " << testing::TestDevice() << ": " << made.status();
      }
      kernels_.push_back(*std::move(made));
      workers_.push_back(
          std::make_unique<Worker>(p, budgets[p], &rendezvous_, kernels_.back().get()));
    }
    return SetUp(0);
  }

  // Forms generation `generation` of the mesh's communicators, under a fresh rendezvous prefix.
  ::testing::AssertionResult SetUp(int64_t generation) {
    const std::string prefix = absl::StrCat("mesh", next_prefix_++, "/");
    for (const Outcome& r : OnEveryWorker([&](int64_t) {
           v1::Command command;
           v1::SetupMesh* setup = command.mutable_setup_mesh();
           setup->set_mesh_id(kMeshId);
           *setup->mutable_mesh() = ToProto(*mesh_);
           setup->set_store_prefix(prefix);
           setup->set_timeout_ms(absl::ToInt64Milliseconds(timeout_));
           setup->set_connect_timeout_ms(absl::ToInt64Milliseconds(kTimeout));
           setup->set_generation(generation);
           return command;
         })) {
      if (!r.ok()) return ::testing::AssertionFailure() << "setting up: " << r.status;
    }
    return ::testing::AssertionSuccess();
  }

  // An all_reduce over the whole mesh gives every rank the sum.
  ::testing::AssertionResult AllReduceWorks() {
    HostTensor sum = HostTensor::Zeros(DType::kFloat32, {5}).value();
    for (size_t p = 0; p < workers_.size(); ++p) {
      const HostTensor mine =
          SmallIntegerTensor(DType::kFloat32, {5}, 10 + static_cast<uint32_t>(p));
      ReduceInto(ReduceOp::kSum, DType::kFloat32, sum.data(), mine.data(), sum.num_elements());
      if (absl::Status s = workers_[p]->store.PutHost("y", mine.Clone()); !s.ok()) {
        return ::testing::AssertionFailure() << s;
      }
    }
    const auto reduced = OnEveryWorker([&](int64_t) {
      v1::Command command;
      v1::RunCollective* r = command.mutable_collective();
      r->set_mesh_id(kMeshId);
      r->set_mesh_dim(-1);
      r->set_op(v1::ALL_REDUCE_OP);
      r->set_reduce_op(v1::SUM);
      r->set_input("y");
      r->set_output("y_sum");
      return command;
    });
    for (size_t p = 0; p < workers_.size(); ++p) {
      if (!reduced[p].ok()) {
        return ::testing::AssertionFailure() << "position " << p << ": " << reduced[p].status;
      }
      if (reduced[p].reply.has_broken()) {
        return ::testing::AssertionFailure()
               << "position " << p << " reports a broken communicator";
      }
      absl::StatusOr<HostTensor> got = workers_[p]->store.GetHost("y_sum");
      if (!got.ok() || !SameTensor(*got, sum)) {
        return ::testing::AssertionFailure() << "position " << p << " holds a wrong sum";
      }
    }
    return ::testing::AssertionSuccess();
  }

  ShardStore& store(int64_t p) { return workers_[p]->store; }

 private:
  static inline std::atomic<int> next_prefix_{0};
  std::unique_ptr<DeviceMesh> mesh_;
  absl::Duration timeout_;
  gloo::rendezvous::HashStore rendezvous_;
  std::vector<std::unique_ptr<kernels::KernelBackend>> kernels_;  // outlive the workers
  std::vector<std::unique_ptr<Worker>> workers_;
};

// --- SpreadTensor ---

enum class SpreadFailure { kSourceMissing, kSourceWrongShape, kOverBudget };

struct SpreadCase {
  Shape mesh;
  int64_t failing;  // mesh position of the rank that fails
  SpreadFailure failure;
};

std::string SpreadCaseName(const ::testing::TestParamInfo<SpreadCase>& info) {
  const SpreadCase& c = info.param;
  const char* kind = c.failure == SpreadFailure::kSourceMissing      ? "missing"
                     : c.failure == SpreadFailure::kSourceWrongShape ? "wrong_shape"
                                                                     : "over_budget";
  return absl::StrCat("mesh", MeshName(c.mesh), "_rank", c.failing, "_", kind);
}

class SpreadStandInTest : public ::testing::TestWithParam<SpreadCase> {};

TEST_P(SpreadStandInTest, FailingRankTakesPartAndReportsAfterwards) {
  const SpreadCase& c = GetParam();
  constexpr char kTensor[] = "dt/x";
  const DeviceMesh mesh = DeviceMesh::Create(testing::TestDevice(), c.mesh, {}).value();
  std::vector<int64_t> budgets(static_cast<size_t>(mesh.size()), kBudget);
  if (c.failure == SpreadFailure::kOverBudget) budgets[c.failing] = kTightBudget;
  ExecutorMesh workers;
  ASSERT_TRUE(workers.Start(mesh, budgets));

  // Replicate on every mesh dim, spread from position 0 along all of them.
  const std::vector<Placement> placements(c.mesh.size(), Placement::Replicate());
  const DTensorSpec spec = MakeDTensorSpec(mesh, placements, kShape, DType::kFloat32).value();
  const HostTensor value = SmallIntegerTensor(DType::kFloat32, kShape, 3);
  if (c.failure == SpreadFailure::kSourceWrongShape) {
    ASSERT_TRUE(
        workers.store(0).PutHost(kTensor, HostTensor::Zeros(DType::kFloat32, {3}).value()).ok());
  } else if (c.failure != SpreadFailure::kSourceMissing) {
    ASSERT_TRUE(workers.store(0).PutHost(kTensor, value.Clone()).ok());
  }
  const absl::Time start = absl::Now();
  const auto spread = workers.OnEveryWorker([&](int64_t) {
    v1::Command command;
    v1::SpreadTensor* s = command.mutable_spread_tensor();
    s->set_mesh_id(kMeshId);
    s->set_tensor(kTensor);
    *s->mutable_spec() = ToProto(spec);
    for (size_t m = 0; m < c.mesh.size(); ++m) {
      s->add_source_coordinate(0);
      s->add_broadcast_dims(static_cast<int>(m));
    }
    return command;
  });
  EXPECT_LT(absl::Now() - start, kTimeout / 2) << "a rank was stranded in a broadcast";

  // Ranks other than the failing one hold what the source sent: its value, or the stand-in zeros.
  const bool source_failed = c.failure != SpreadFailure::kOverBudget;
  const HostTensor want =
      source_failed ? HostTensor::Zeros(DType::kFloat32, kShape).value() : value.Clone();
  for (int64_t p = 0; p < mesh.size(); ++p) {
    if (p == c.failing) {
      const absl::StatusCode code =
          c.failure == SpreadFailure::kSourceMissing      ? absl::StatusCode::kNotFound
          : c.failure == SpreadFailure::kSourceWrongShape ? absl::StatusCode::kInvalidArgument
                                                          : absl::StatusCode::kResourceExhausted;
      const std::string named = c.failure == SpreadFailure::kOverBudget ? "budget" : kTensor;
      EXPECT_EQ(spread[p].status.code(), code) << "position " << p << ": " << spread[p].status;
      EXPECT_THAT(spread[p].status.message(), HasSubstr(named)) << "position " << p;
      if (c.failure == SpreadFailure::kOverBudget) {
        EXPECT_FALSE(workers.store(p).Get(kTensor).ok()) << "position " << p;
      }
      continue;
    }
    ASSERT_TRUE(spread[p].ok()) << "position " << p << ": " << spread[p].status;
    absl::StatusOr<HostTensor> held = workers.store(p).GetHost(kTensor);
    ASSERT_TRUE(held.ok()) << "position " << p << ": " << held.status();
    EXPECT_TRUE(SameTensor(*held, want)) << "position " << p;
  }
  EXPECT_TRUE(workers.AllReduceWorks());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SpreadStandInTest,
    ::testing::Values(SpreadCase{{2}, 0, SpreadFailure::kSourceMissing},
                      SpreadCase{{2}, 0, SpreadFailure::kSourceWrongShape},
                      SpreadCase{{2}, 1, SpreadFailure::kOverBudget},
                      SpreadCase{{4}, 3, SpreadFailure::kOverBudget},
                      SpreadCase{{2, 2}, 0, SpreadFailure::kSourceMissing},
                      SpreadCase{{2, 2}, 0, SpreadFailure::kSourceWrongShape},
                      // (1,0) relays the copy it received along mesh dim 1 to (1,1).
                      SpreadCase{{2, 2}, 2, SpreadFailure::kOverBudget},
                      SpreadCase{{2, 2}, 1, SpreadFailure::kOverBudget},
                      SpreadCase{{2, 2}, 3, SpreadFailure::kOverBudget}),
    SpreadCaseName);

// A replica repair of two diagonal ranks of a 2x2 mesh, (0,0) and (1,1), which hold nothing: along
// mesh dim 0, the group of column 0 broadcasts from index 1 and that of column 1 from index 0
// (SpreadTensor.group_sources), and every rank ends with the value. Group sources that name two
// roots for one group are refused by both of its ranks before any broadcast (the other group still
// spreads), as is a list of the wrong length.
TEST(SpreadGroupSourcesTest, EachGroupBroadcastsFromItsOwnSource) {
  constexpr char kTensor[] = "dt/r";
  const DeviceMesh mesh = DeviceMesh::Create(testing::TestDevice(), {2, 2}, {}).value();
  ExecutorMesh workers;
  ASSERT_TRUE(workers.Start(mesh, std::vector<int64_t>(4, kBudget)));
  const DTensorSpec spec = MakeDTensorSpec(mesh, {Placement::Replicate(), Placement::Replicate()},
                                           kShape, DType::kFloat32)
                               .value();
  const HostTensor value = SmallIntegerTensor(DType::kFloat32, kShape, 5);
  const auto spread = [&](const std::vector<int64_t>& sources) {
    for (int64_t p : {1, 2}) {
      EXPECT_TRUE(workers.store(p).PutHost(kTensor, value.Clone()).ok());
    }
    for (int64_t p : {0, 3}) workers.store(p).Erase(kTensor);
    return workers.OnEveryWorker([&](int64_t) {
      v1::Command command;
      v1::SpreadTensor* s = command.mutable_spread_tensor();
      s->set_mesh_id(kMeshId);
      s->set_tensor(kTensor);
      *s->mutable_spec() = ToProto(spec);
      s->add_source_coordinate(0);
      s->add_source_coordinate(0);
      s->add_broadcast_dims(0);
      s->mutable_group_sources()->Assign(sources.begin(), sources.end());
      return command;
    });
  };

  const auto repaired = spread({1, 0, 1, 0});
  for (int64_t p = 0; p < 4; ++p) {
    ASSERT_TRUE(repaired[p].ok()) << "position " << p << ": " << repaired[p].status;
    absl::StatusOr<HostTensor> held = workers.store(p).GetHost(kTensor);
    ASSERT_TRUE(held.ok()) << "position " << p << ": " << held.status();
    EXPECT_TRUE(SameTensor(*held, value)) << "position " << p;
  }

  // Column 0 (positions 0 and 2) names 1 and 0.
  const auto mixed = spread({1, 0, 0, 0});
  for (int64_t p : {0, 2}) {
    EXPECT_EQ(mixed[p].status.code(), absl::StatusCode::kInvalidArgument) << "position " << p;
    EXPECT_THAT(mixed[p].status.message(), HasSubstr("name 1 and 0")) << "position " << p;
  }
  for (int64_t p : {1, 3}) {
    ASSERT_TRUE(mixed[p].ok()) << "position " << p << ": " << mixed[p].status;
    EXPECT_TRUE(SameTensor(workers.store(p).GetHost(kTensor).value(), value)) << "position " << p;
  }
  EXPECT_FALSE(workers.store(0).Get(kTensor).ok()) << "a refused spread wrote its tensor";

  const auto short_list = spread({1, 0});
  for (int64_t p = 0; p < 4; ++p) {
    EXPECT_EQ(short_list[p].status.code(), absl::StatusCode::kInvalidArgument) << "position " << p;
    EXPECT_THAT(short_list[p].status.message(), HasSubstr("2 entries for a mesh of 4 ranks"))
        << "position " << p;
  }
  EXPECT_TRUE(workers.AllReduceWorks());
}

// --- Collectives on local tensors ---

// Rank 1 of 2 has too small a budget for the collective's output (or, where it writes none, its
// scratch buffer); rank 0 is the root.
class CollectiveStandInTest : public ::testing::TestWithParam<v1::CollectiveOp> {};

TEST_P(CollectiveStandInTest, RankOverBudgetTakesPartAndReportsAfterwards) {
  const DeviceMesh mesh = DeviceMesh::Create(testing::TestDevice(), {2}, {}).value();
  ExecutorMesh workers;
  ASSERT_TRUE(workers.Start(mesh, {kBudget, kTightBudget + 2 * 8448}));
  // Rank 1 holds its input; the rest of its budget is less than the output or scratch.
  for (int64_t p = 0; p < 2; ++p) {
    ASSERT_TRUE(
        workers.store(p)
            .PutHost("in", SmallIntegerTensor(DType::kFloat32, kShape, static_cast<uint32_t>(p)))
            .ok());
  }
  ASSERT_TRUE(
      workers.store(1).PutHost("filler", HostTensor::Zeros(DType::kFloat32, {2048}).value()).ok());
  const absl::Time start = absl::Now();
  const auto outcome = workers.OnEveryWorker([&](int64_t) {
    v1::Command command;
    v1::RunCollective* r = command.mutable_collective();
    r->set_mesh_id(kMeshId);
    r->set_mesh_dim(0);
    r->set_op(GetParam());
    r->set_reduce_op(v1::SUM);
    r->set_input("in");
    r->set_output("out");
    r->set_root(0);
    r->set_peer(1);
    return command;
  });
  EXPECT_LT(absl::Now() - start, kTimeout / 2) << "a rank was stranded in the collective";
  EXPECT_TRUE(outcome[0].ok()) << outcome[0].status;
  EXPECT_EQ(outcome[1].status.code(), absl::StatusCode::kResourceExhausted) << outcome[1].status;
  EXPECT_THAT(outcome[1].status.message(), HasSubstr("budget"));
  EXPECT_FALSE(workers.store(1).Get("out").ok());
  EXPECT_TRUE(workers.store(1).Get("in").ok());
  EXPECT_TRUE(workers.AllReduceWorks());
}

// Every collective, each of which makes rank 1 a buffer (it is the receiver of the send).
INSTANTIATE_TEST_SUITE_P(Ops, CollectiveStandInTest,
                         ::testing::Values(v1::BROADCAST, v1::ALL_REDUCE_OP, v1::REDUCE,
                                           v1::ALL_GATHER_OP, v1::GATHER, v1::SCATTER,
                                           v1::REDUCE_SCATTER_OP, v1::ALL_TO_ALL_OP, v1::SEND_RECV),
                         [](const ::testing::TestParamInfo<v1::CollectiveOp>& info) {
                           return v1::CollectiveOp_Name(info.param);
                         });

// --- A broken communicator, reported and re-formed ---

struct BreakCase {
  Shape mesh;
  int mesh_dim;  // the group position 0 runs a barrier in alone (-1: the whole mesh)
};

class ReformTest : public ::testing::TestWithParam<BreakCase> {};

TEST_P(ReformTest, BrokenCommunicatorIsReportedUntilTheMeshIsReformed) {
  const BreakCase& c = GetParam();
  const DeviceMesh mesh = DeviceMesh::Create(testing::TestDevice(), c.mesh, {}).value();
  ExecutorMesh workers;
  ASSERT_TRUE(
      workers.Start(mesh, std::vector<int64_t>(mesh.size(), kBudget), absl::Milliseconds(300)));
  auto barrier = [&](int64_t) {
    v1::Command command;
    v1::RunCollective* r = command.mutable_collective();
    r->set_mesh_id(kMeshId);
    r->set_mesh_dim(c.mesh_dim);
    r->set_op(v1::BARRIER);
    return command;
  };
  // Alone in its group, position 0 times out: its communicator is broken for good.
  const Outcome alone = workers.OnEveryWorker(barrier, {0})[0];
  EXPECT_FALSE(alone.ok());
  ASSERT_TRUE(alone.reply.has_broken());
  EXPECT_EQ(alone.reply.broken().mesh_id(), kMeshId);
  EXPECT_EQ(alone.reply.broken().generation(), 0);
  EXPECT_THAT(alone.reply.broken().reason(), HasSubstr("Barrier"));
  // Every later command on the mesh says so, whatever it does.
  const Outcome later = workers.OnEveryWorker(barrier, {0})[0];
  EXPECT_EQ(later.status.code(), absl::StatusCode::kFailedPrecondition) << later.status;
  EXPECT_TRUE(later.reply.has_broken());

  // The next generation works on every group again, and nothing is reported broken.
  ASSERT_TRUE(workers.SetUp(1));
  for (const Outcome& r : workers.OnEveryWorker(barrier)) {
    EXPECT_TRUE(r.ok()) << r.status;
    EXPECT_FALSE(r.reply.has_broken());
  }
  EXPECT_TRUE(workers.AllReduceWorks());
  // A break of the new generation is reported as such.
  const Outcome again = workers.OnEveryWorker(barrier, {0})[0];
  ASSERT_TRUE(again.reply.has_broken());
  EXPECT_EQ(again.reply.broken().generation(), 1);
}

INSTANTIATE_TEST_SUITE_P(Cases, ReformTest,
                         ::testing::Values(BreakCase{{2}, -1}, BreakCase{{2}, 0},
                                           BreakCase{{2, 2}, -1}, BreakCase{{2, 2}, 0},
                                           BreakCase{{2, 2}, 1}),
                         [](const ::testing::TestParamInfo<BreakCase>& info) {
                           return absl::StrCat("mesh", MeshName(info.param.mesh), "_dim",
                                               info.param.mesh_dim < 0
                                                   ? std::string("all")
                                                   : absl::StrCat(info.param.mesh_dim));
                         });

// --- One broken communicator breaks the mesh's others on that worker ---

// Position 0 of a 2x2 mesh is alone in a barrier on `broken_dim` (-1: the whole mesh) and times
// out; `waiter`, which shares position 0's group along `waiter_dim` but not along `broken_dim`,
// enters a barrier there 3 s after position 0 started. Position 0 breaks all its communicators of
// the mesh when one breaks, closing their connections, so the waiter fails at once (UNAVAILABLE,
// about 1 s after it started) instead of at its own timeout (DEADLINE_EXCEEDED after 4 s): in the
// soak, a worker whose redistribute failed on the dead worker's dim left its peer waiting 10 s in
// the next step, on another dim, and the two then reached the next mesh's collectives apart.
struct WholeMeshCase {
  int broken_dim;
  int64_t waiter;
  int waiter_dim;
};

class WholeMeshBreakTest : public ::testing::TestWithParam<WholeMeshCase> {};

TEST_P(WholeMeshBreakTest, PeersInTheMeshsOtherGroupsFailAtOnce) {
  const WholeMeshCase& c = GetParam();
  constexpr absl::Duration kMeshTimeout = absl::Seconds(4);
  constexpr absl::Duration kWaiterDelay = absl::Seconds(3);
  const DeviceMesh mesh = DeviceMesh::Create(testing::TestDevice(), {2, 2}, {}).value();
  if (testing::TestDevice() != "cpu") GTEST_SKIP() << "NCCL communicators have no connections";
  ExecutorMesh workers;
  ASSERT_TRUE(workers.Start(mesh, std::vector<int64_t>(mesh.size(), kBudget), kMeshTimeout));
  auto barrier = [](int dim) {
    return [dim](int64_t) {
      v1::Command command;
      v1::RunCollective* r = command.mutable_collective();
      r->set_mesh_id(kMeshId);
      r->set_mesh_dim(dim);
      r->set_op(v1::BARRIER);
      return command;
    };
  };
  Outcome alone, waited;
  absl::Duration waiter_took;
  std::thread breaker([&] { alone = workers.OnEveryWorker(barrier(c.broken_dim), {0})[0]; });
  std::thread waiter([&] {
    absl::SleepFor(kWaiterDelay);
    const absl::Time start = absl::Now();
    waited = workers.OnEveryWorker(barrier(c.waiter_dim), {c.waiter})[c.waiter];
    waiter_took = absl::Now() - start;
  });
  breaker.join();
  waiter.join();
  EXPECT_EQ(alone.status.code(), absl::StatusCode::kDeadlineExceeded) << alone.status;
  EXPECT_EQ(waited.status.code(), absl::StatusCode::kUnavailable) << waited.status;
  EXPECT_LT(waiter_took, kMeshTimeout - kWaiterDelay + absl::Seconds(2));
  EXPECT_TRUE(waited.reply.has_broken());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, WholeMeshBreakTest,
    ::testing::Values(WholeMeshCase{0, 1, 1}, WholeMeshCase{1, 2, 0}, WholeMeshCase{-1, 1, 1}),
    [](const ::testing::TestParamInfo<WholeMeshCase>& info) {
      return absl::StrCat("broken_",
                          info.param.broken_dim < 0 ? std::string("all")
                                                    : absl::StrCat("dim", info.param.broken_dim),
                          "_waiter", info.param.waiter, "_dim", info.param.waiter_dim);
    });

// --- FillTensor ---

// rand with a range gives the draws of plain rand moved from [0, 1) into [low, high), as torch's
// uniform_(low, high) does, on every shard.
TEST(FillTensorTest, RandWithARangeIsTheUnitDrawMovedIntoIt) {
  const DeviceMesh line = *DeviceMesh::Create(testing::TestDevice(), {2});
  ExecutorMesh mesh;
  ASSERT_TRUE(mesh.Start(line, {kBudget, kBudget}));
  const DTensorSpec spec = *MakeDTensorSpec(line, {Placement::Shard(0)}, {6, 5}, DType::kFloat32);
  auto fill = [&](const std::string& output, double low, double high) {
    return mesh.OnEveryWorker([&](int64_t) {
      v1::Command command;
      v1::FillTensor* f = command.mutable_fill_tensor();
      f->set_mesh_id(kMeshId);
      f->set_output(output);
      *f->mutable_spec() = ToProto(spec);
      f->set_factory(v1::RAND);
      f->set_seed(9);
      f->set_low(low);
      f->set_high(high);
      return command;
    });
  };
  for (const Outcome& o : fill("unit", 0, 0)) ASSERT_TRUE(o.ok()) << o.status;
  for (const Outcome& o : fill("ranged", -0.25, 0.25)) ASSERT_TRUE(o.ok()) << o.status;
  for (int64_t p = 0; p < 2; ++p) {
    const HostTensor unit = *mesh.store(p).GetHost("unit");
    const HostTensor ranged = *mesh.store(p).GetHost("ranged");
    ASSERT_EQ(ranged.shape(), (Shape{3, 5}));
    for (int64_t i = 0; i < ranged.num_elements(); ++i) {
      const float u = unit.data_as<float>()[i];
      const float r = ranged.data_as<float>()[i];
      EXPECT_FLOAT_EQ(r, -0.25f + 0.5f * u) << "position " << p << ", element " << i;
      EXPECT_GE(r, -0.25f);
      EXPECT_LT(r, 0.25f);
    }
  }
}

}  // namespace
}  // namespace tessera

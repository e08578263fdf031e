// DTensors on a real local cluster (a coordinator and 4 CPU worker processes; meshes 1-D of 4,
// 2x2, and 1-D of 2 on other workers), through the client library, compared with core's simulated
// mesh and single-process references: distribute / from_local / to_local / full_tensor round trips
// for every dtype and placement, every redistribute pair, factories, ops with sharding
// propagation, cross-mesh moves, concurrent clients, ownership and leases.

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/sharding/op_call.h"
#include "core/sharding/redistribute_planner.h"
#include "core/sharding/sharding_propagation.h"
#include "core/sharding/simulated_mesh.h"
#include "kernels/backend.h"
#include "kernels/run_op.h"
#include "kernels/testing/reference.h"
#include "tessera/tessera.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/support/placement_product.h"

namespace tessera {
namespace {

using ::tessera::client::DTensor;
using ::tessera::client::Session;
using ::tessera::testing::StatusIs;
using ::tessera::testing::TensorsMatch;

// The cluster every test of this file shares.
struct Shared {
  testing::TestCluster cluster;
  std::shared_ptr<Session> session;
  std::map<std::string, client::Mesh> meshes;
};
Shared* shared = nullptr;

class DTensorEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    shared = new Shared;
    LocalClusterOptions options = testing::TestClusterOptions(4);
    options.memory_budget_bytes = int64_t{256} << 20;
    options.client_grace = absl::Seconds(2);
    ASSERT_TRUE(shared->cluster.Start(options).ok());
    Session& c = *shared->cluster.client;
    ASSERT_TRUE(client::InitDeviceMesh(c, testing::TestDevice(), {4}, {"x"}, "line").ok());
    ASSERT_TRUE(
        client::InitDeviceMesh(c, testing::TestDevice(), {2, 2}, {"dp", "tp"}, "grid").ok());
    client::MeshOptions pair;
    pair.worker_ids = {3, 2};
    ASSERT_TRUE(client::InitDeviceMesh(c, testing::TestDevice(), {2}, {}, "pair", pair).ok());
    absl::StatusOr<std::shared_ptr<Session>> s =
        Session::Connect(shared->cluster.cluster->address());
    ASSERT_TRUE(s.ok()) << s.status();
    shared->session = *s;
    for (const char* name : {"line", "grid", "pair"}) {
      absl::StatusOr<client::Mesh> m = client::GetMesh(*shared->session, name);
      ASSERT_TRUE(m.ok()) << m.status();
      shared->meshes.emplace(name, *m);
    }
  }
  void TearDown() override {
    shared->session.reset();
    shared->cluster.Stop();
    delete shared;
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new DTensorEnvironment);

Session& S() { return *shared->session; }
const client::Mesh& M(const std::string& name) { return shared->meshes.at(name); }

// Every placement list on `mesh_ndim` mesh dims for a tensor of `rank` dims: S(d), R, P(sum).
std::vector<std::vector<Placement>> AllPlacements(int mesh_ndim, int rank, bool partial = true) {
  std::vector<Placement> one;
  for (int d = 0; d < rank; ++d) one.push_back(Placement::Shard(d));
  one.push_back(Placement::Replicate());
  if (partial) one.push_back(Placement::Partial());
  return testing::PlacementProduct(one, mesh_ndim);
}

DTensorSpec SpecOf(const client::Mesh& mesh, const std::vector<Placement>& placements,
                   const Shape& shape, DType dtype) {
  return MakeDTensorSpec(mesh.mesh, placements, shape, dtype).value();
}

// ---------------------------------------------------------------------------------------------
// distribute_tensor / from_local / to_local / full_tensor round trips.

using RoundTripCase = std::tuple<std::string, Shape, DType>;
class RoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(RoundTripTest, EveryPlacementMatchesTheSimulatedMesh) {
  const auto& [mesh_name, shape, dtype] = GetParam();
  const client::Mesh& mesh = M(mesh_name);
  const HostTensor full = kernels::testing::RandomTensor(dtype, shape, 7);
  SimulatedMesh sim(mesh.mesh);
  for (const auto& placements : AllPlacements(mesh.mesh.ndim(), static_cast<int>(shape.size()))) {
    SCOPED_TRACE(PlacementsToString(placements));
    const DTensorSpec spec = SpecOf(mesh, placements, shape, dtype);
    const std::vector<HostTensor> want = sim.Distribute(full, spec).value();
    absl::StatusOr<DTensor> t = client::DistributeTensor(S(), full, mesh, placements);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(static_cast<int64_t>(t->info().shards.size()), mesh.mesh.size());
    for (int64_t r = 0; r < mesh.mesh.size(); ++r) {
      EXPECT_EQ(t->info().shards[r], LocalShapeAndOffset(spec, mesh.mesh.ranks()[r]).value())
          << "rank " << r;
    }
    for (int64_t r = 0; r < mesh.mesh.size(); ++r) {
      absl::StatusOr<HostTensor> local = t->ToLocal(r);
      ASSERT_TRUE(local.ok()) << local.status();
      EXPECT_TRUE(TensorsMatch(*local, want[r])) << "rank " << r;
    }
    absl::StatusOr<HostTensor> back = t->FullTensor();
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(TensorsMatch(*back, full));

    // from_local with the same shards gives the same tensor (the global shape is passed, as
    // uneven shards need).
    client::FromLocalOptions options;
    options.shape = shape;
    absl::StatusOr<DTensor> f = client::FromLocal(S(), want, mesh, placements, options);
    ASSERT_TRUE(f.ok()) << f.status();
    absl::StatusOr<HostTensor> again = f->FullTensor();
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(TensorsMatch(*again, full));
  }
}

std::vector<RoundTripCase> RoundTripCases() {
  std::vector<RoundTripCase> cases;
  for (const char* mesh : {"line", "grid"}) {
    for (const Shape& shape : {Shape{8, 6}, Shape{5, 3}, Shape{3}, Shape{0, 4}, Shape{2, 3, 5}}) {
      for (DType dtype : kAllDTypes) {
        if (shape.size() == 3 && dtype != DType::kFloat32 && dtype != DType::kBFloat16) continue;
        cases.emplace_back(mesh, shape, dtype);
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cluster, RoundTripTest, ::testing::ValuesIn(RoundTripCases()),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_",
                                               absl::StrJoin(std::get<1>(info.param), "x"), "_",
                                               DTypeName(std::get<2>(info.param)), "_", info.index);
                         });

// ---------------------------------------------------------------------------------------------
// Redistribute: every (source, destination) pair, run by the workers with real collectives.

using PairCase = std::tuple<std::string, Shape, DType>;
class RedistributeTest : public ::testing::TestWithParam<PairCase> {};

TEST_P(RedistributeTest, EveryPairMatchesThePlannerAndTheSimulatedMesh) {
  const auto& [mesh_name, shape, dtype] = GetParam();
  const client::Mesh& mesh = M(mesh_name);
  const HostTensor full = kernels::testing::RandomTensor(dtype, shape, 11);
  const auto all = AllPlacements(mesh.mesh.ndim(), static_cast<int>(shape.size()));
  for (const auto& src : all) {
    const DTensorSpec spec = SpecOf(mesh, src, shape, dtype);
    SimulatedMesh sim(mesh.mesh);
    const std::vector<HostTensor> shards = sim.Distribute(full, spec).value();
    absl::StatusOr<DTensor> t = client::DistributeTensor(S(), full, mesh, src);
    ASSERT_TRUE(t.ok()) << t.status();
    for (const auto& dst : all) {
      SCOPED_TRACE(absl::StrCat(PlacementsToString(src), " -> ", PlacementsToString(dst)));
      absl::StatusOr<RedistributePlan> plan = PlanRedistribute(spec, dst);
      absl::StatusOr<DTensor> out = t->Redistribute(dst);
      if (!plan.ok()) {
        EXPECT_TRUE(StatusIs(out.status(), absl::StatusCode::kInvalidArgument));
        continue;
      }
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->plan().ToString(), plan->ToString());
      const std::vector<HostTensor> want = sim.Redistribute(spec, *plan,
                                                            [&] {
                                                              std::vector<HostTensor> copy;
                                                              for (const HostTensor& s : shards)
                                                                copy.push_back(s.Clone());
                                                              return copy;
                                                            }())
                                               .value();
      for (int64_t r = 0; r < mesh.mesh.size(); ++r) {
        absl::StatusOr<HostTensor> local = out->ToLocal(r);
        ASSERT_TRUE(local.ok()) << local.status();
        EXPECT_TRUE(TensorsMatch(*local, want[r])) << "rank " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cluster, RedistributeTest,
                         ::testing::Values(PairCase{"line", {8, 6}, DType::kFloat32},
                                           PairCase{"line", {5, 3}, DType::kInt32},
                                           PairCase{"line", {3, 2}, DType::kBFloat16},
                                           PairCase{"grid", {8, 6}, DType::kInt32},
                                           PairCase{"grid", {5, 3}, DType::kFloat32},
                                           PairCase{"grid", {3, 1}, DType::kInt64}),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param), "_",
                                               absl::StrJoin(std::get<1>(info.param), "x"), "_",
                                               DTypeName(std::get<2>(info.param)));
                         });

TEST(RedistributeExplain, ReturnsThePlanWithoutRunningIt) {
  const client::Mesh& mesh = M("grid");
  absl::StatusOr<DTensor> t =
      client::Zeros(S(), mesh, {8, 8}, {Placement::Shard(1), Placement::Shard(1)});
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<Placement> dst{Placement::Shard(1), Placement::Shard(0)};
  absl::StatusOr<RedistributePlan> plan = t->ExplainRedistribute(dst);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->ToString(), PlanRedistribute(t->spec(), dst).value().ToString());
  ASSERT_EQ(plan->steps.size(), 1u);
  EXPECT_EQ(plan->steps[0].collective, Collective::kAllToAll);
  EXPECT_EQ(plan->steps[0].mesh_dim, 1);
  // With the planner asked for.
  absl::StatusOr<RedistributePlan> greedy = t->ExplainRedistribute(dst, PlannerKind::kGreedy);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_EQ(greedy->ToString(),
            PlanRedistribute(t->spec(), dst, PlannerKind::kGreedy).value().ToString());
}

// ---------------------------------------------------------------------------------------------
// Factories: each shard is the slice of the full tensor, random ones included.

TEST(Factories, ShardsAreSlicesOfTheFullTensor) {
  std::unique_ptr<kernels::KernelBackend> cpu = kernels::MakeBackend("cpu").value();
  for (const char* mesh_name : {"line", "grid"}) {
    const client::Mesh& mesh = M(mesh_name);
    for (const auto& placements : AllPlacements(mesh.mesh.ndim(), 2, /*partial=*/false)) {
      SCOPED_TRACE(absl::StrCat(mesh_name, " ", PlacementsToString(placements)));
      const Shape shape{7, 5};
      using client::Factory;
      for (Factory f :
           {Factory::kZeros, Factory::kOnes, Factory::kFull, Factory::kRand, Factory::kRandn}) {
        absl::StatusOr<DTensor> t =
            client::CreateTensor(S(), f, mesh, shape, placements, DType::kFloat32, 2.5, 1234);
        ASSERT_TRUE(t.ok()) << t.status();
        HostTensor want = HostTensor::Uninitialized(DType::kFloat32, shape).value();
        const std::vector<int64_t> origin{0, 0};
        switch (f) {
          case Factory::kZeros:
            ASSERT_TRUE(cpu->Fill(kernels::ViewOf(want), 0).ok());
            break;
          case Factory::kOnes:
            ASSERT_TRUE(cpu->Fill(kernels::ViewOf(want), 1).ok());
            break;
          case Factory::kFull:
            ASSERT_TRUE(cpu->Fill(kernels::ViewOf(want), 2.5).ok());
            break;
          default:
            ASSERT_TRUE(cpu->RandomFill(f == Factory::kRand ? kernels::Distribution::kUniform
                                                            : kernels::Distribution::kNormal,
                                        1234, shape, origin, kernels::ViewOf(want))
                            .ok());
        }
        absl::StatusOr<HostTensor> got = t->FullTensor();
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_TRUE(TensorsMatch(*got, want)) << "factory " << static_cast<int>(f);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Ops with sharding propagation, against the single-process kernels.

struct OpTestCase {
  std::string name;
  OpCall op;
  std::vector<Shape> shapes;
};

OpCall Call(OpKind kind, std::vector<int> dims = {}, bool keepdim = false) {
  OpCall op;
  op.kind = kind;
  op.dims = std::move(dims);
  op.keepdim = keepdim;
  return op;
}

std::vector<OpTestCase> OpCases() {
  OpCall transpose = Call(OpKind::kTranspose);
  OpCall cast = Call(OpKind::kCast);
  cast.dtype = DType::kFloat64;
  OpCall addmm = Call(OpKind::kAddmm);
  addmm.alpha = 0.5;
  addmm.beta = 2;
  return {
      {"mm", Call(OpKind::kMm), {{8, 6}, {6, 4}}},
      {"mm_uneven", Call(OpKind::kMm), {{5, 3}, {3, 7}}},
      {"matmul", Call(OpKind::kMatmul), {{2, 4, 6}, {6, 4}}},
      {"addmm", addmm, {{4}, {8, 6}, {6, 4}}},
      {"add", Call(OpKind::kAdd), {{8, 6}, {8, 6}}},
      {"add_broadcast", Call(OpKind::kAdd), {{5, 6}, {6}}},
      {"sub", Call(OpKind::kSub), {{5, 3}, {5, 3}}},
      {"mul_broadcast", Call(OpKind::kMul), {{8, 1}, {8, 6}}},
      {"div", Call(OpKind::kDiv), {{8, 6}, {8, 6}}},
      {"relu", Call(OpKind::kRelu), {{5, 6}}},
      {"gelu", Call(OpKind::kGelu), {{8, 6}}},
      {"tanh", Call(OpKind::kTanh), {{5, 3}}},
      {"sum_dim0", Call(OpKind::kSum, {0}), {{5, 6}}},
      {"sum_all", Call(OpKind::kSum), {{8, 6}}},
      {"mean_dim1_keep", Call(OpKind::kMean, {1}, true), {{5, 6}}},
      {"max_dim0", Call(OpKind::kMax, {0}), {{5, 6}}},
      {"transpose", transpose, {{5, 6}}},
      {"cast", cast, {{8, 6}}},
  };
}

using OpParam = std::tuple<OpTestCase, std::string>;
class OpsTest : public ::testing::TestWithParam<OpParam> {};

TEST_P(OpsTest, EveryInputLayoutMatchesTheSingleProcessResult) {
  const auto& [c, mesh_name] = GetParam();
  const client::Mesh& mesh = M(mesh_name);
  std::unique_ptr<kernels::KernelBackend> cpu = kernels::MakeBackend("cpu").value();
  std::vector<HostTensor> fulls;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    // Division by values near zero would make the comparison ill-conditioned.
    const double lo = c.op.kind == OpKind::kDiv && i == 1 ? 0.5 : -2.0;
    fulls.push_back(kernels::testing::RandomTensor(DType::kFloat32, c.shapes[i],
                                                   static_cast<uint32_t>(100 + i), lo, 2.0));
  }
  std::vector<const HostTensor*> ptrs;
  for (const HostTensor& t : fulls) ptrs.push_back(&t);
  const HostTensor want = kernels::RunLocalOp(*cpu, c.op, ptrs, c.shapes).value();

  // Input layouts: each input's placements drawn from all lists, cycled so every list appears.
  std::vector<std::vector<std::vector<Placement>>> choices;
  size_t most = 0;
  for (const Shape& s : c.shapes) {
    choices.push_back(AllPlacements(mesh.mesh.ndim(), static_cast<int>(s.size())));
    most = std::max(most, choices.back().size());
  }
  for (size_t k = 0; k < most; ++k) {
    std::vector<DTensor> inputs;
    std::vector<DTensorSpec> specs;
    std::string trace;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      const auto& placements = choices[i][(k * (i + 1)) % choices[i].size()];
      absl::StatusOr<DTensor> t = client::DistributeTensor(S(), fulls[i], mesh, placements);
      ASSERT_TRUE(t.ok()) << t.status();
      inputs.push_back(*t);
      specs.push_back(t->spec());
      absl::StrAppend(&trace, PlacementsToString(placements), " ");
    }
    SCOPED_TRACE(trace);
    const OpSharding expected = PropagateSharding(c.op, specs).value();
    absl::StatusOr<DTensor> out = client::RunOp(c.op, inputs);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(PlacementsToString(out->placements()),
              PlacementsToString(expected.output.placements));
    size_t moved = 0;
    for (const RedistributePlan& p : expected.input_plans) moved += p.steps.empty() ? 0 : 1;
    EXPECT_EQ(out->redistributions().size(), moved);
    absl::StatusOr<HostTensor> got = out->FullTensor();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, want, 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(Cluster, OpsTest,
                         ::testing::Combine(::testing::ValuesIn(OpCases()),
                                            ::testing::Values("line", "grid")),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param).name, "_",
                                               std::get<1>(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// Across meshes, which DTensor itself cannot do.

TEST(CrossMesh, MovesKeepTheValues) {
  const HostTensor full = kernels::testing::RandomTensor(DType::kFloat32, {9, 5}, 3);
  const std::vector<
      std::tuple<std::string, std::vector<Placement>, std::string, std::vector<Placement>>>
      moves = {
          {"line", {Placement::Shard(0)}, "grid", {Placement::Shard(1), Placement::Replicate()}},
          {"grid", {Placement::Partial(), Placement::Shard(0)}, "pair", {Placement::Shard(0)}},
          {"pair", {Placement::Replicate()}, "line", {Placement::Partial()}},
          {"line", {Placement::Shard(1)}, "pair", {Placement::Replicate()}},
      };
  for (const auto& [from, src, to, dst] : moves) {
    SCOPED_TRACE(absl::StrCat(from, PlacementsToString(src), " -> ", to, PlacementsToString(dst)));
    absl::StatusOr<DTensor> t = client::DistributeTensor(S(), full, M(from), src);
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<DTensor> moved = t->Redistribute(dst, to);
    ASSERT_TRUE(moved.ok()) << moved.status();
    EXPECT_EQ(moved->info().mesh, to);
    EXPECT_EQ(moved->relayed_bytes(), static_cast<int64_t>(full.nbytes()));
    SimulatedMesh sim(M(to).mesh);
    const std::vector<HostTensor> want =
        sim.Distribute(full, SpecOf(M(to), dst, full.shape(), full.dtype())).value();
    for (int64_t r = 0; r < M(to).mesh.size(); ++r) {
      absl::StatusOr<HostTensor> local = moved->ToLocal(r);
      ASSERT_TRUE(local.ok()) << local.status();
      EXPECT_TRUE(TensorsMatch(*local, want[r])) << "rank " << r;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The collective API in place (output = input): the workers update the stored buffer.

TEST(InPlaceCollectives, AllReduceBroadcastAndRepeatedOutputsUpdateTheTensor) {
  Session& c = *shared->cluster.client;
  std::vector<HostTensor> inputs;
  for (int r = 0; r < 4; ++r) {
    inputs.push_back(kernels::testing::RandomTensor(DType::kInt32, {3, 5}, 40 + r, -100, 100));
    ASSERT_TRUE(c.PutLocal("line", r, "inplace", inputs.back()).ok());
  }
  HostTensor sum = inputs[0].Clone();
  for (int r = 1; r < 4; ++r) {
    ReduceInto(ReduceOp::kSum, DType::kInt32, sum.data(), inputs[r].data(), sum.num_elements());
  }
  const client::Mesh& line = M("line");
  ASSERT_TRUE(c.RunCollective(client::AllReduce(line.group(), "inplace")).ok());
  for (int r = 0; r < 4; ++r) {
    absl::StatusOr<HostTensor> got = c.GetLocal("line", r, "inplace");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, sum)) << "rank " << r;
  }
  ASSERT_TRUE(c.PutLocal("line", 2, "inplace", inputs[2]).ok());
  ASSERT_TRUE(c.RunCollective(client::Broadcast(line["x"], "inplace", /*src=*/2)).ok());
  for (int r = 0; r < 4; ++r) {
    absl::StatusOr<HostTensor> got = c.GetLocal("line", r, "inplace");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(TensorsMatch(*got, inputs[2])) << "rank " << r;
  }
  // Again into an output that exists (its buffer is reused): the result is the new one.
  for (int round = 0; round < 2; ++round) {
    for (int r = 0; r < 4; ++r) {
      inputs[r] = kernels::testing::RandomTensor(DType::kInt32, {3, 5}, 60 + 4 * round + r, -9, 9);
      ASSERT_TRUE(c.PutLocal("line", r, "inplace", inputs[r]).ok());
    }
    ASSERT_TRUE(c.RunCollective(client::AllGather(line.group(), "inplace", "gathered")).ok());
    for (int r = 0; r < 4; ++r) {
      absl::StatusOr<HostTensor> got = c.GetLocal("line", r, "gathered");
      ASSERT_TRUE(got.ok()) << got.status();
      for (int q = 0; q < 4; ++q) {
        EXPECT_EQ(
            std::memcmp(got->data() + q * inputs[q].nbytes(), inputs[q].data(), inputs[q].nbytes()),
            0)
            << "round " << round << ", rank " << r << ", block " << q;
      }
    }
  }
  EXPECT_TRUE(c.DeleteLocal("line", "gathered").ok());
  EXPECT_TRUE(c.DeleteLocal("line", "inplace").ok());
}

// ---------------------------------------------------------------------------------------------
// Several clients at once, ownership, leases.

TEST(Clients, ConcurrentClientsEachGetTheirOwnResults) {
  constexpr int kClients = 3;
  std::vector<absl::Status> results(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([c, &results] {
      results[c] = [c]() -> absl::Status {
        absl::StatusOr<std::shared_ptr<Session>> s =
            Session::Connect(shared->cluster.cluster->address());
        if (!s.ok()) return s.status();
        const client::Mesh& mesh = M(c % 2 == 0 ? "line" : "grid");
        for (int i = 0; i < 10; ++i) {
          const HostTensor a = kernels::testing::RandomTensor(DType::kInt32, {6, 4}, c * 100 + i);
          const std::vector<Placement> placements(mesh.mesh.ndim(), Placement::Shard(0));
          absl::StatusOr<DTensor> t = client::DistributeTensor(**s, a, mesh, placements);
          if (!t.ok()) return t.status();
          absl::StatusOr<DTensor> twice = client::Add(*t, *t);
          if (!twice.ok()) return twice.status();
          absl::StatusOr<HostTensor> got = twice->FullTensor();
          if (!got.ok()) return got.status();
          for (int64_t e = 0; e < a.num_elements(); ++e) {
            if (kernels::testing::GetInt64(*got, e) != 2 * kernels::testing::GetInt64(a, e)) {
              return absl::InternalError(absl::StrCat("client ", c, " element ", e, " is wrong"));
            }
          }
        }
        return absl::OkStatus();
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < kClients; ++c)
    EXPECT_TRUE(results[c].ok()) << "client " << c << ": " << results[c];
}

TEST(Clients, OnlyTheOwnerFreesATensor) {
  absl::StatusOr<DTensor> t = client::Ones(S(), M("line"), {4}, {Placement::Shard(0)});
  ASSERT_TRUE(t.ok()) << t.status();
  client::SessionOptions options;
  options.client_id = "someone-else";
  options.keep_alive = false;
  absl::StatusOr<std::shared_ptr<Session>> other =
      Session::Connect(shared->cluster.cluster->address(), options);
  ASSERT_TRUE(other.ok());
  absl::StatusOr<DTensor> seen = client::GetTensor(**other, t->name());
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_TRUE(StatusIs(seen->Free(), absl::StatusCode::kPermissionDenied,
                       {t->name(), S().client_id(), "someone-else"}));
  absl::StatusOr<HostTensor> still = t->FullTensor();
  ASSERT_TRUE(still.ok()) << still.status();
}

TEST(Clients, ADisconnectedClientsTensorsAreReclaimedAfterTheGracePeriod) {
  std::string name;
  {
    absl::StatusOr<std::shared_ptr<Session>> s =
        Session::Connect(shared->cluster.cluster->address());
    ASSERT_TRUE(s.ok());
    absl::StatusOr<DTensor> t = client::Ones(**s, M("line"), {64}, {Placement::Shard(0)});
    ASSERT_TRUE(t.ok());
    t->Detach();  // as if the process died holding it
    name = t->name();
    absl::StatusOr<DTensor> found = client::GetTensor(S(), name);
    ASSERT_TRUE(found.ok());
  }
  // The session is gone (its lease is no longer renewed): after the 2 s grace the tensor goes.
  absl::Status status;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    absl::SleepFor(absl::Milliseconds(200));
    status = client::GetTensor(S(), name).status();
  } while (status.ok() && absl::Now() < deadline);
  EXPECT_TRUE(StatusIs(status, absl::StatusCode::kNotFound, {name}));
}

}  // namespace
}  // namespace tessera

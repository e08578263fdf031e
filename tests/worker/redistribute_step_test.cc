// RunRedistributeStep and RunRedistributePlan on ranks run as threads of this process, each mesh
// dim's process groups connected as real Gloo communicators, over the product meshes × tensor
// shapes × dtypes × every single step PlanStep accepts (and, on the 2×2 mesh, a spread-out sample
// of whole plans). Every rank's result is compared bit for bit with SimulatedMesh running the same
// steps on the shards it distributed; inputs are small integers, so reductions are exact in any
// order and the communicator's reduction order cannot matter.

#include "worker/redistribute_step.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/sharding/redistribute_planner.h"
#include "core/sharding/simulated_mesh.h"
#include "core/small_integer_tensor.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/placement_product.h"
#include "worker/comm/make_communicator.h"

namespace tessera {
namespace {

using comm::Communicator;

// Runs fn(i) on one thread for each i in [0, n).
void OnThreads(int64_t n, const std::function<void(int64_t)>& fn) {
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < n; ++i) threads.emplace_back([&fn, i] { fn(i); });
  for (auto& t : threads) t.join();
}

// One mesh's communicators: rank position → mesh dim → the group of that rank along that dim.
struct MeshGroups {
  std::vector<std::unique_ptr<Communicator>> owned;
  std::vector<std::vector<Communicator*>> by_position;
};

// Connects every process group of every mesh dim of `mesh`, all at once, under distinct prefixes.
MeshGroups Connect(const DeviceMesh& mesh) {
  static auto* store = new gloo::rendezvous::HashStore;
  struct Member {
    int m;
    int64_t position;
    int64_t first;
  };
  std::vector<Member> members;
  for (int m = 0; m < mesh.ndim(); ++m) {
    const int64_t stride = ContiguousStrides(mesh.shape())[m];
    for (int64_t pos = 0; pos < mesh.size(); ++pos) {
      const int64_t me = mesh.CoordinateOfIndex(pos)[m];
      members.push_back({m, pos, pos - me * stride});
    }
  }
  MeshGroups groups;
  groups.owned.resize(members.size());
  comm::CommunicatorOptions options;
  options.timeout = absl::Seconds(20);
  const std::string mesh_name = absl::StrJoin(mesh.shape(), "x");
  OnThreads(static_cast<int64_t>(members.size()), [&](int64_t i) {
    const Member& x = members[i];
    const int rank = static_cast<int>(mesh.CoordinateOfIndex(x.position)[x.m]);
    auto c = comm::MakeCommunicator(
        "cpu", *store, absl::StrCat("redistribute_step/", mesh_name, "/dim", x.m, "/", x.first),
        rank, static_cast<int>(mesh.size(x.m)), options);
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) groups.owned[i] = *std::move(c);
  });
  groups.by_position.assign(mesh.size(), std::vector<Communicator*>(mesh.ndim(), nullptr));
  for (size_t i = 0; i < members.size(); ++i) {
    groups.by_position[members[i].position][members[i].m] = groups.owned[i].get();
  }
  return groups;
}

// The groups the tests share, connected once per mesh (Gloo contexts are slow to create) and
// closed when the tests end.
class SharedGroups : public ::testing::Environment {
 public:
  static const MeshGroups& Of(const DeviceMesh& mesh) {
    auto [it, inserted] = groups_.try_emplace(mesh.shape());
    if (inserted) it->second = Connect(mesh);
    return it->second;
  }
  void TearDown() override { groups_.clear(); }

 private:
  static inline std::map<Shape, MeshGroups> groups_;
};
[[maybe_unused]] auto* const kSharedGroups = ::testing::AddGlobalTestEnvironment(new SharedGroups);

struct Case {
  Shape mesh;
  Shape tensor;
  DType dtype;
};

// Every placement tuple for a tensor of `rank` dims on a mesh of `ndim` dims; every reduce op on a
// 1-D mesh, sum, avg and max on larger ones.
std::vector<std::vector<Placement>> AllPlacements(int ndim, int rank) {
  std::vector<Placement> options = {Placement::Replicate(), Placement::Partial(ReduceOp::kSum),
                                    Placement::Partial(ReduceOp::kAvg),
                                    Placement::Partial(ReduceOp::kMax)};
  if (ndim == 1) {
    options.push_back(Placement::Partial(ReduceOp::kMin));
    options.push_back(Placement::Partial(ReduceOp::kProduct));
  }
  for (int d = 0; d < rank; ++d) options.push_back(Placement::Shard(d));
  return testing::PlacementProduct(options, ndim);
}

class RedistributeStepTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    groups_ = &SharedGroups::Of(mesh_);
    for (const auto& g : groups_->owned) ASSERT_NE(g, nullptr);
    full_ = SmallIntegerTensor(GetParam().dtype, GetParam().tensor, 5);
  }

  DTensorSpec Spec(const std::vector<Placement>& placements) const {
    return MakeDTensorSpec(mesh_, placements, GetParam().tensor, GetParam().dtype).value();
  }

  // Runs `plan` from `src` on every rank with the real communicators (one step at a time through
  // RunRedistributeStep, or at once through RunRedistributePlan) and on the simulated mesh, and
  // expects every rank's result to be bit-equal to the simulator's.
  void ExpectMatchesSimulator(const DTensorSpec& src, const RedistributePlan& plan,
                              bool step_by_step, const std::string& what) {
    SimulatedMesh sim(mesh_);
    const std::vector<HostTensor> shards = sim.Distribute(full_, src).value();
    std::vector<HostTensor> inputs;
    for (const HostTensor& s : shards) inputs.push_back(s.Clone());
    absl::StatusOr<std::vector<HostTensor>> want = sim.Redistribute(src, plan, std::move(inputs));
    ASSERT_TRUE(want.ok()) << what << ": " << want.status();

    std::vector<absl::StatusOr<HostTensor>> got(mesh_.size());
    OnThreads(mesh_.size(), [&](int64_t pos) {
      const std::vector<int64_t> coord = mesh_.CoordinateOfIndex(pos);
      const std::vector<Communicator*>& dims = groups_->by_position[pos];
      // Each rank's kernels and memory space, as a cpu worker holds them.
      kernels::CpuBackend cpu;
      const auto down =
          [&](const absl::StatusOr<kernels::DeviceTensor>& t) -> absl::StatusOr<HostTensor> {
        if (!t.ok()) return t.status();
        return cpu.Download(t->View());
      };
      kernels::DeviceTensor shard = cpu.Upload(shards[pos]).value();
      if (!step_by_step) {
        // Alternate between an owned shard and a borrowed one, which must stay untouched.
        if ((plan.steps.size() + static_cast<size_t>(pos)) % 2 == 0) {
          got[pos] = down(RunRedistributePlan(cpu, src, plan, coord, dims, std::move(shard)));
        } else {
          got[pos] = down(RunRedistributePlan(cpu, src, plan, coord, dims, &shard));
          if (!cpu.Download(std::as_const(shard).View())->BitEqual(shards[pos])) {
            got[pos] = absl::InternalError("borrowed shard changed");
          }
        }
        return;
      }
      DTensorSpec spec = src;
      absl::StatusOr<kernels::DeviceTensor> local = std::move(shard);
      for (const RedistributeStep& step : plan.steps) {
        local = RunRedistributeStep(cpu, spec, step, coord, dims[step.mesh_dim], *local);
        if (!local.ok()) break;
        spec.placements[step.mesh_dim] = step.to;
      }
      got[pos] = down(local);
    });
    for (int64_t pos = 0; pos < mesh_.size(); ++pos) {
      ASSERT_TRUE(got[pos].ok()) << what << ", rank position " << pos << ": " << got[pos].status();
      EXPECT_TRUE(got[pos]->BitEqual((*want)[pos]))
          << what << ", rank position " << pos << ": got " << DTypeName(got[pos]->dtype())
          << ShapeToString(got[pos]->shape()) << ", want " << ShapeToString((*want)[pos].shape());
    }
  }

  const DeviceMesh mesh_ = DeviceMesh::Create("cpu", GetParam().mesh).value();
  const MeshGroups* groups_ = nullptr;
  HostTensor full_;
};

TEST_P(RedistributeStepTest, EveryStepPlanStepAcceptsMatchesTheSimulator) {
  const int rank = static_cast<int>(GetParam().tensor.size());
  const auto all = AllPlacements(mesh_.ndim(), rank);
  const auto options = AllPlacements(1, rank);
  int checked = 0;
  int embeds = 0;  // Shard -> Partial(sum) steps among them
  for (const auto& placements : all) {
    const DTensorSpec src = Spec(placements);
    for (int m = 0; m < mesh_.ndim(); ++m) {
      for (const auto& to : options) {
        if (to[0] == placements[m]) continue;
        absl::StatusOr<RedistributeStep> step = PlanStep(src, m, to[0]);
        if (!step.ok()) continue;
        const std::string what =
            absl::StrCat(src.ToString(), ": mesh dim ", m, " -> ", PlacementToString(to[0]), " (",
                         CollectiveName(step->collective), ")");
        ExpectMatchesSimulator(src, RedistributePlan{{*step}}, /*step_by_step=*/true, what);
        ++checked;
        if (step->collective == Collective::kLocalEmbed) ++embeds;
      }
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(embeds, 0);
}

TEST_P(RedistributeStepTest, SampledPlansMatchTheSimulator) {
  const int rank = static_cast<int>(GetParam().tensor.size());
  const auto all = AllPlacements(mesh_.ndim(), rank);
  // On the 2-D mesh a spread-out sample of the pairs; the offset varies with the case.
  const size_t stride = mesh_.ndim() >= 2 ? 11 : 1;
  const size_t offset =
      (GetParam().tensor.size() * 3 + static_cast<size_t>(GetParam().dtype)) % stride;
  int checked = 0;
  for (size_t pair = offset; pair < all.size() * all.size(); pair += stride) {
    const DTensorSpec src = Spec(all[pair / all.size()]);
    const std::vector<Placement>& dst = all[pair % all.size()];
    const PlannerKind kind = pair % 2 == 0 ? PlannerKind::kMinCost : PlannerKind::kGreedy;
    absl::StatusOr<RedistributePlan> plan = PlanRedistribute(src, dst, kind);
    if (!plan.ok()) continue;  // Shard → Partial(not sum) and Partial(op1) → Partial(op2)
    const std::string what =
        absl::StrCat(src.ToString(), " -> ", PlacementsToString(dst), "\n", plan->ToString());
    ExpectMatchesSimulator(src, *plan, /*step_by_step=*/false, what);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

std::vector<Case> Cases() {
  const std::vector<Shape> meshes = {{2}, {3}, {4}, {2, 2}};
  // Even, uneven, smaller than the mesh, zero-size, 3-D, and 3-D led by a unit dim.
  const std::vector<Shape> shapes = {{8, 12}, {5, 7}, {1, 3}, {0, 6}, {3, 4, 5}, {1, 8, 4}};
  std::vector<Case> cases;
  for (const Shape& mesh : meshes) {
    for (const Shape& shape : shapes) {
      for (DType dtype : {DType::kFloat32, DType::kInt64, DType::kBFloat16, DType::kBool}) {
        cases.push_back({mesh, shape, dtype});
      }
    }
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat("mesh", absl::StrJoin(info.param.mesh, "x"), "_tensor",
                      absl::StrJoin(info.param.tensor, "x"), "_", DTypeName(info.param.dtype));
}

INSTANTIATE_TEST_SUITE_P(Product, RedistributeStepTest, ::testing::ValuesIn(Cases()), CaseName);

// Arguments that do not fit the spec are rejected before anything is sent.
TEST(RedistributeStepArgumentsTest, RejectsWhatDoesNotFitTheSpec) {
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
  const DTensorSpec spec =
      MakeDTensorSpec(mesh, {Placement::Shard(0)}, {5, 3}, DType::kFloat32).value();
  const RedistributeStep gather = PlanStep(spec, 0, Placement::Replicate()).value();
  kernels::CpuBackend cpu;
  const kernels::DeviceTensor shard = cpu.Zeros(DType::kFloat32, {3, 3}).value();
  const std::vector<int64_t> coord = {0};
  auto code = [](const absl::StatusOr<kernels::DeviceTensor>& r) { return r.status().code(); };

  EXPECT_EQ(code(RunRedistributeStep(cpu, spec, gather, coord, nullptr, shard)),
            absl::StatusCode::kInvalidArgument);  // a collective without a communicator
  const kernels::DeviceTensor wrong_shape = cpu.Zeros(DType::kFloat32, {2, 3}).value();
  const RedistributeStep chunk = PlanStep(spec, 0, Placement::Shard(1)).value();
  EXPECT_EQ(code(RunRedistributeStep(cpu, spec, chunk, coord, nullptr, wrong_shape)),
            absl::StatusCode::kInvalidArgument);  // not rank 0's shard
  const std::vector<int64_t> outside = {2};
  EXPECT_EQ(code(RunRedistributeStep(cpu, spec, chunk, outside, nullptr, shard)),
            absl::StatusCode::kInvalidArgument);
  RedistributeStep mislabeled = gather;
  mislabeled.collective = Collective::kLocalChunk;
  EXPECT_EQ(code(RunRedistributeStep(cpu, spec, mislabeled, coord, nullptr, shard)),
            absl::StatusCode::kInvalidArgument);
  const DTensorSpec replicated =
      MakeDTensorSpec(mesh, {Placement::Replicate()}, {5, 3}, DType::kFloat32).value();
  EXPECT_EQ(code(RunRedistributeStep(cpu, replicated, gather, coord, nullptr, shard)),
            absl::StatusCode::kInvalidArgument);  // the step starts from S(0), the spec is R
  const std::vector<Communicator*> no_groups;
  EXPECT_EQ(code(RunRedistributePlan(cpu, spec, RedistributePlan{{gather}}, coord, no_groups,
                                     cpu.Clone(shard.View()).value())),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera

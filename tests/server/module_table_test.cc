#include "server/tables/module_table.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

// Four registered cpu workers (no process behind them: nothing is posted here) and two meshes
// over them: "grid" (2 dp x 2 tp) and "line" (1-D of 2).
struct Fixture {
  explicit Fixture(ModuleTable::Unpublish unpublish = nullptr)
      : registry(absl::Seconds(1), absl::Seconds(60)),
        dispatcher(&registry, "secret"),
        meshes(&registry),
        tensors(&meshes, &dispatcher, &ledger),
        modules(std::move(unpublish)) {
    std::vector<int64_t> ids, incarnations;
    for (int i = 0; i < 4; ++i) {
      v1::RegisterRequest r;
      r.set_address(absl::StrCat("127.0.0.1:", 3000 + i));
      r.set_device("cpu");
      v1::RegisterReply reply = registry.Register(r);
      ids.push_back(reply.worker_id());
      incarnations.push_back(reply.incarnation());
    }
    grid = std::make_shared<Mesh>("grid", *DeviceMesh::Create("cpu", {2, 2}, {"dp", "tp"}, ids),
                                  incarnations, absl::Seconds(1));
    line = std::make_shared<Mesh>("line", *DeviceMesh::Create("cpu", {2}, {}, {ids[0], ids[1]}),
                                  std::vector<int64_t>{incarnations[0], incarnations[1]},
                                  absl::Seconds(1));
    EXPECT_TRUE(meshes.Add(grid).ok());
    EXPECT_TRUE(meshes.Add(line).ok());
  }

  // Linear(10, 16) named `name` on `mesh`, colwise on tp (weight and bias Shard(0)), its
  // parameters entered in the tensor table.
  std::shared_ptr<ModuleEntry> Colwise(const std::string& name, std::shared_ptr<Mesh> mesh) {
    ModelSpec spec;
    spec.root.type = ModuleType::kLinear;
    spec.root.in_features = 10;
    spec.root.out_features = 16;
    spec.input = {DType::kFloat32, {-1, 10}};
    auto module = std::make_shared<ModuleEntry>(name, mesh, spec, "{\"type\": \"Linear\"}",
                                                modules.NextProgramId());
    absl::MutexLock lock(&module->mu);
    Program& program = module->program;
    program.tp_mesh_dim = mesh->mesh.ndim() - 1;
    std::vector<Placement> placements(mesh->mesh.ndim(), Placement::Replicate());
    placements.back() = Placement::Shard(0);
    program.parameters = {{"weight", {16, 10}, placements}, {"bias", {16}, placements}};
    program.input = spec.input;
    program.input_layout = {Placement::Replicate(), true};
    program.output_layout = {Placement::Shard(-1), false};
    program.output_features = 16;
    program.unmatched = {"net9"};
    module->plan_json = "{\"plan\": \"ColwiseParallel\"}";
    for (const ProgramParameter& p : program.parameters) {
      module->parameters.push_back(*tensors.Add(
          ParameterTensorName(name, p.fqn), mesh,
          *MakeDTensorSpec(mesh->mesh, p.placements, p.shape, DType::kFloat32), ModuleOwner(name)));
    }
    return module;
  }

  WorkerRegistry registry;
  Dispatcher dispatcher;
  MeshTable meshes;
  WorkerBytes ledger;
  DTensorTable tensors;
  ModuleTable modules;
  std::shared_ptr<Mesh> grid;
  std::shared_ptr<Mesh> line;
};

TEST(ModuleTableTest, NamesAreLettersDigitsUnderscoresAndDashes) {
  for (const std::string& good :
       std::vector<std::string>{"mlp", "MLP_2", "a-b", std::string(100, 'x')}) {
    EXPECT_TRUE(ModuleTable::CheckName(good).ok()) << good;
  }
  for (const std::string& bad : {std::string(), std::string("a.b"), std::string("a/b"),
                                 std::string("a b"), std::string(101, 'x')}) {
    // Quoted as it was sent, cut past 64 bytes with its length.
    EXPECT_TRUE(
        StatusIs(ModuleTable::CheckName(bad), absl::StatusCode::kInvalidArgument,
                 {bad.size() > 64 ? std::string("... (101 bytes)") : absl::StrCat("'", bad, "'")}))
        << bad;
  }
}

TEST(ModuleTableTest, WhatAModuleHoldsIsNamedAfterIt) {
  EXPECT_EQ(ParameterTensorName("mlp", "net1.weight"), "mlp.net1.weight");
  EXPECT_EQ(GradientTensorName("mlp", "net1.weight"), "mlp.net1.weight.grad");
  EXPECT_EQ(MomentumWorkerName("mlp", "net1.weight"), "module/mlp/net1.weight.momentum");
  EXPECT_EQ(ModuleOwner("mlp"), "module:mlp");
}

TEST(ModuleTableTest, ANameIsHeldFromLoadToRemoval) {
  Fixture f;
  ASSERT_TRUE(f.modules.Reserve("m").ok());
  EXPECT_TRUE(
      StatusIs(f.modules.Reserve("m"), absl::StatusCode::kAlreadyExists, {"'m' is being loaded"}));
  EXPECT_TRUE(StatusIs(f.modules.Find("m").status(), absl::StatusCode::kNotFound, {"'m'"}));
  f.modules.Commit(f.Colwise("m", f.grid));
  EXPECT_TRUE(StatusIs(f.modules.Reserve("m"), absl::StatusCode::kAlreadyExists, {"'m' exists"}));
  ASSERT_TRUE(f.modules.Find("m").ok());

  ASSERT_TRUE(f.modules.Reserve("n").ok());
  f.modules.Unreserve("n");  // a failed load gives the name back
  EXPECT_TRUE(f.modules.Reserve("n").ok());
  f.modules.Commit(f.Colwise("n", f.line));
  std::vector<std::string> names;
  for (const auto& m : f.modules.List()) names.push_back(m->name);
  EXPECT_THAT(names, ElementsAre("m", "n"));

  absl::StatusOr<std::shared_ptr<ModuleEntry>> taken = f.modules.Take("m");
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ((*taken)->name, "m");
  EXPECT_TRUE(StatusIs(f.modules.Take("m").status(), absl::StatusCode::kNotFound, {"'m'"}));
  EXPECT_EQ(f.modules.List().size(), 1u);
}

TEST(ModuleTableTest, ProgramIdsAreFresh) {
  Fixture f;
  std::set<int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.insert(f.modules.NextProgramId());
  EXPECT_EQ(ids.size(), 5u);
}

// Worked by hand: Linear(10, 16) colwise on the (2 dp, 2 tp) grid: weight [16, 10] and bias [16]
// are (R, S(0)); ranks at tp 0 hold rows 0-7, at tp 1 rows 8-15, both dp rows alike.
TEST(ModuleTableTest, DescribeGivesEveryParametersLayoutAndTheEdges) {
  Fixture f;
  std::shared_ptr<ModuleEntry> m = f.Colwise("m", f.grid);
  const v1::ModuleInfo info = ModuleTable::Describe(*m);
  EXPECT_EQ(info.name(), "m");
  EXPECT_EQ(info.mesh(), "grid");
  EXPECT_EQ(info.plan_json(), "{\"plan\": \"ColwiseParallel\"}");
  ASSERT_EQ(info.parameters_size(), 2);
  const v1::ModuleParameter& w = info.parameters(0);
  EXPECT_EQ(w.fqn(), "weight");
  EXPECT_EQ(w.tensor(), "m.weight");
  EXPECT_TRUE(w.grad().empty());
  ASSERT_EQ(w.meta().shards_size(), 4);
  const std::vector<std::pair<Shape, Shape>> want = {
      {{8, 10}, {0, 0}}, {{8, 10}, {8, 0}}, {{8, 10}, {0, 0}}, {{8, 10}, {8, 0}}};
  for (int r = 0; r < 4; ++r) {
    const v1::LocalShard& s = w.meta().shards(r);
    EXPECT_EQ(Shape(s.local_shape().begin(), s.local_shape().end()), want[r].first) << r;
    EXPECT_EQ(Shape(s.global_offset().begin(), s.global_offset().end()), want[r].second) << r;
  }
  absl::StatusOr<std::vector<Placement>> placements = FromProto(w.meta().placements());
  ASSERT_TRUE(placements.ok());
  EXPECT_THAT(*placements, ElementsAre(Placement::Replicate(), Placement::Shard(0)));
  EXPECT_EQ(info.parameters(1).tensor(), "m.bias");
  EXPECT_EQ(info.tp_mesh_dim(), 1);
  EXPECT_THAT(info.input_shape(), ElementsAre(-1, 10));
  EXPECT_TRUE(info.input_layout().placement().has_replicate());
  EXPECT_EQ(info.output_layout().placement().shard().dim(), -1);
  EXPECT_FALSE(info.output_layout().is_dtensor());
  EXPECT_EQ(info.output_features(), 16);
  EXPECT_THAT(info.unmatched(), ElementsAre("net9"));

  // Gradients are named once a step made them.
  {
    absl::MutexLock lock(&m->mu);
    for (const ProgramParameter& p : m->program.parameters) {
      m->gradients.push_back(*f.tensors.Add(GradientTensorName("m", p.fqn), f.grid,
                                            m->parameters[m->gradients.size()]->spec,
                                            ModuleOwner("m")));
    }
  }
  EXPECT_EQ(ModuleTable::Describe(*m).parameters(1).grad(), "m.bias.grad");
}

TEST(ModuleTableTest, AMeshThatGoesTakesItsModulesAndTheirServedVersions) {
  std::vector<std::string> unpublished;
  Fixture f([&](const v1::PublishedVersion& p) {
    unpublished.push_back(absl::StrCat(p.model(), "/", p.version()));
  });
  std::shared_ptr<ModuleEntry> on_grid = f.Colwise("g", f.grid);
  {
    absl::MutexLock lock(&on_grid->mu);
    v1::PublishedVersion p;
    p.set_model("served");
    p.set_version("2");
    on_grid->published.push_back(p);
    on_grid->momentum = true;
  }
  ASSERT_TRUE(f.modules.Reserve("g").ok());
  f.modules.Commit(on_grid);
  ASSERT_TRUE(f.modules.Reserve("l").ok());
  f.modules.Commit(f.Colwise("l", f.line));

  const std::vector<std::string> freed = f.modules.ForgetMesh(*f.grid);
  EXPECT_THAT(freed, UnorderedElementsAre("module/g/weight.momentum", "module/g/bias.momentum"));
  EXPECT_THAT(unpublished, ElementsAre("served/2"));
  EXPECT_TRUE(StatusIs(f.modules.Find("g").status(), absl::StatusCode::kNotFound));
  EXPECT_TRUE(f.modules.Find("l").ok());
  absl::MutexLock lock(&on_grid->mu);
  EXPECT_TRUE(on_grid->removed);
}

}  // namespace
}  // namespace tessera

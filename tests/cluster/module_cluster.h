// What the module cluster tests share: a real local cluster with named meshes, started once per
// test binary; weights written as safetensors for LoadModule; a module's state_dict as a map; and
// torch's _compare_module check of a module on the service against the single-process reference
// (reference/module_reference.h): parameters, forward, output.sum() backward and one SGD step.
#ifndef TESSERA_TESTS_MODULE_CLUSTER_H_
#define TESSERA_TESTS_MODULE_CLUSTER_H_

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/files/safetensors.h"
#include "core/host_tensor.h"
#include "core/modules/module_spec.h"
#include "core/shape.h"
#include "core/sharding/placement.h"
#include "gtest/gtest.h"
#include "reference/module_reference.h"
#include "tessera/tessera.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera::testing {

// Tensors by state_dict name.
using Weights = std::map<std::string, HostTensor>;

// torch.testing.assert_close's default tolerances for float32.
constexpr double kFloat32Rtol = 1.3e-6;
constexpr double kFloat32Atol = 1e-5;

// A mesh set up for the tests: its name, shape, dim names, and workers (empty: the first live).
struct TestMesh {
  std::string name;
  Shape shape;
  std::vector<std::string> dim_names;
  std::vector<int64_t> worker_ids = {};
};

// The running cluster, its session, its meshes by name and a scratch directory.
struct ModuleCluster {
  TestCluster cluster;
  std::shared_ptr<client::Session> session;
  std::map<std::string, client::Mesh> meshes;
  std::string dir;
};

// Starts the cluster and its meshes before the first test and stops it after the last, publishing
// it through `*cluster` meanwhile.
class ModuleClusterEnvironment : public ::testing::Environment {
 public:
  ModuleClusterEnvironment(LocalClusterOptions options, std::vector<TestMesh> meshes,
                           ModuleCluster** cluster)
      : options_(std::move(options)), meshes_(std::move(meshes)), out_(cluster) {}

  void SetUp() override {
    auto* c = new ModuleCluster;
    *out_ = c;
    const absl::Status started = c->cluster.Start(options_);
    ASSERT_TRUE(started.ok()) << started;
    c->session = c->cluster.client;
    for (const TestMesh& m : meshes_) {
      absl::StatusOr<client::MeshInfo> info = client::InitDeviceMesh(
          *c->session, TestDevice(), m.shape, m.dim_names, m.name, {.worker_ids = m.worker_ids});
      ASSERT_TRUE(info.ok()) << info.status() << c->cluster.LogHint();
      c->meshes.emplace(m.name, client::Mesh{info->name, info->mesh});
    }
    c->dir = std::filesystem::path(::testing::TempDir()) / absl::StrCat("modules_", ::getpid());
    std::filesystem::create_directories(c->dir);
  }
  void TearDown() override {
    ModuleCluster* c = *out_;
    std::filesystem::remove_all(c->dir);
    c->session.reset();
    c->cluster.Stop();
    delete c;
    *out_ = nullptr;
  }

 private:
  LocalClusterOptions options_;
  std::vector<TestMesh> meshes_;
  ModuleCluster** out_;
};

// Writes `weights` as a safetensors file at `path` and returns the path.
inline std::string WriteWeightsFile(const std::string& path, const Weights& weights) {
  SafetensorsFile f;
  for (const auto& [name, t] : weights) f.tensors.emplace(name, t.Clone());
  const absl::Status written = WriteSafetensorsFile(path, f);
  EXPECT_TRUE(written.ok()) << written;
  return path;
}

// The module's state_dict() as a map (with `gradients`, also "<fqn>.grad").
inline Weights StateDictOf(const client::Module& m, bool gradients = false) {
  Weights w;
  absl::StatusOr<std::vector<std::pair<std::string, HostTensor>>> state = m.StateDict(gradients);
  EXPECT_TRUE(state.ok()) << state.status();
  if (!state.ok()) return w;
  for (auto& [name, t] : *state) w.emplace(name, std::move(t));
  return w;
}

// Names of the DTensors on the service that start with `prefix`.
inline std::vector<std::string> TensorsNamed(client::Session& session, const std::string& prefix) {
  std::vector<std::string> names;
  absl::StatusOr<std::vector<client::DTensorInfo>> all = session.ListTensors();
  EXPECT_TRUE(all.ok()) << all.status();
  if (!all.ok()) return names;
  for (const auto& t : *all) {
    if (absl::StartsWith(t.name, prefix)) names.push_back(t.name);
  }
  return names;
}

// Loads `spec_json` as `name` on `mesh` from a safetensors file of `params` written to the scratch
// directory, then parallelize_module(module, mesh, plan), as torch's tests parallelize a deepcopy
// of the reference module. Every pattern of the plan is expected to match.
inline absl::StatusOr<client::Module> LoadAndParallelize(ModuleCluster& c, const std::string& name,
                                                         const std::string& spec_json,
                                                         const Weights& params,
                                                         const std::string& mesh,
                                                         const std::string& plan) {
  const std::string path = WriteWeightsFile(c.dir + "/" + name + ".safetensors", params);
  absl::StatusOr<client::Module> m =
      client::LoadModule(*c.session, spec_json, c.meshes.at(mesh), name, {.weights_path = path});
  if (!m.ok()) return m.status();
  absl::StatusOr<client::Module> p = client::ParallelizeModule(*m, mesh, plan);
  if (!p.ok()) return p.status();
  EXPECT_EQ(p->info().unmatched, std::vector<std::string>{}) << plan;
  return p;
}

// Every parameter of `module` is laid out on its 1-D mesh as `want` says, and `want` names
// every parameter: the plan's patterns landed where torch's would.
inline void ExpectPlacements(const client::Module& module,
                             const std::map<std::string, Placement>& want) {
  const std::vector<client::ModuleParameter>& params = module.info().parameters;
  EXPECT_EQ(params.size(), want.size());
  for (const client::ModuleParameter& p : params) {
    auto it = want.find(p.fqn);
    if (it == want.end()) {
      ADD_FAILURE() << "unexpected parameter " << p.fqn;
      continue;
    }
    EXPECT_EQ(PlacementsToString(p.spec.placements),
              PlacementsToString(std::vector<Placement>{it->second}))
        << p.fqn;
  }
}

// The reference model of `spec_json` with a copy of `params`.
inline ReferenceModel ReferenceOf(const std::string& spec_json, const Weights& params) {
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(spec_json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  ReferenceModel model{spec.ok() ? *std::move(spec) : ModelSpec{}, {}};
  for (const auto& [fqn, t] : params) model.params.emplace(fqn, t.Clone());
  return model;
}

// Tolerances of a comparison with the reference.
struct Tolerance {
  double rtol = kFloat32Rtol;
  double atol = kFloat32Atol;
};

// The forward of `module` on `input` equals the reference's, the output put together to full
// (torch's redistribute(Replicate()).to_local()).
inline void ExpectForwardMatchesReference(const client::Module& module, const ReferenceModel& model,
                                          const HostTensor& input, Tolerance tolerance = {}) {
  absl::StatusOr<HostTensor> want = ReferenceForward(model, input);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<client::ModuleOutput> got = module.Forward(input);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->full.has_value());
  EXPECT_TRUE(TensorsMatch(*got->full, *want, tolerance.rtol, tolerance.atol)) << "forward";
}

// torch's _compare_module after the forward: every parameter as the reference's, then
// output.sum().backward() (the step's output and every gradient equal the reference's), then
// SGD(lr).step() (every parameter equals the reference's after its SGD step). `model` ends as
// the reference after the step.
inline void ExpectStepMatchesReference(const client::Module& module, ReferenceModel& model,
                                       const HostTensor& input, double lr,
                                       Tolerance tolerance = {}) {
  const Weights before = StateDictOf(module);
  ASSERT_EQ(before.size(), model.params.size());
  for (const auto& [fqn, t] : model.params) {
    ASSERT_TRUE(before.contains(fqn)) << fqn;
    EXPECT_TRUE(TensorsMatch(before.at(fqn), t)) << fqn << " before the step";
  }
  absl::StatusOr<ReferenceStep> want = ReferenceBackward(model, input, nullptr);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<client::StepResult> step =
      module.Step(input, {.sgd = client::SgdOptions{.lr = lr}});
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_TRUE(step->output.full.has_value());
  EXPECT_TRUE(TensorsMatch(*step->output.full, want->output, tolerance.rtol, tolerance.atol))
      << "the step's output";
  EXPECT_EQ(step->gradients.size(), model.params.size());
  const Weights after = StateDictOf(module, /*gradients=*/true);
  for (const auto& [fqn, g] : want->grads) {
    ASSERT_TRUE(after.contains(fqn + ".grad")) << fqn;
    EXPECT_TRUE(TensorsMatch(after.at(fqn + ".grad"), g, tolerance.rtol, tolerance.atol))
        << fqn << ".grad";
  }
  std::map<std::string, HostTensor> no_momentum;
  ASSERT_TRUE(ReferenceSgd(model, want->grads, {.lr = lr}, no_momentum).ok());
  for (const auto& [fqn, t] : model.params) {
    EXPECT_TRUE(TensorsMatch(after.at(fqn), t, tolerance.rtol, tolerance.atol))
        << fqn << " after SGD";
  }
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_MODULE_CLUSTER_H_

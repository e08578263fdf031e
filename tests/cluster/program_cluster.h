#ifndef TESSERA_TESTS_PROGRAM_CLUSTER_H_
#define TESSERA_TESTS_PROGRAM_CLUSTER_H_

// Module programs run by workers' command executors in one process, one thread per rank with real
// Gloo communicators: the workers of a mesh, the pieces of full tensors each rank holds, the
// commands that load and run a program on every rank, and the checks of what they return and
// store. Workers run on TestDevice() (tests/support/test_device.h): on cpu each one's memory space
// is a StrictMemoryBackend, host memory used as a GPU's is; on cuda, rank r holds cuda:r.

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "core/modules/program_edges.h"
#include "core/sharding/dtensor_spec.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/testing/nn_reference.h"
#include "proto/convert.h"
#include "tests/support/test_device.h"
#include "worker/command_executor.h"
#include "worker/shard_store.h"

namespace tessera::testing {

using kernels::testing::ToValues;
using kernels::testing::Values;

inline constexpr int64_t kMeshId = 5;
inline constexpr int64_t kProgramId = 9;
inline constexpr absl::Duration kTimeout = absl::Seconds(10);

// ---------------------------------------------------------------------------------------------
// Tensors and their pieces

// Deterministic values in [-1, 1).
inline Values RandomValues(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  Values v(n);
  for (double& x : v) x = uniform(gen);
  return v;
}

inline HostTensor Float64(const Shape& shape, const Values& values) {
  return HostTensor::FromValues<double>(DType::kFloat64, shape, values);
}

inline HostTensor Random(const Shape& shape, uint32_t seed) {
  return Float64(shape, RandomValues(NumElements(shape), seed));
}

// Tensors moved into a vector (an initializer list would copy them).
template <typename... T>
inline std::vector<HostTensor> Tensors(T&&... tensors) {
  std::vector<HostTensor> v;
  (v.push_back(std::forward<T>(tensors)), ...);
  return v;
}

// `t` (float64 or int64) with its floating values in `dtype`.
inline HostTensor InDType(const HostTensor& t, DType dtype) {
  if (t.dtype() != DType::kFloat64 || dtype == DType::kFloat64) return t.Clone();
  HostTensor out = HostTensor::ZerosOfValidShape(DType::kFloat32, t.shape());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    out.data_as<float>()[i] = static_cast<float>(t.data_as<double>()[i]);
  }
  return out;
}

// The piece of `full` that the rank at `coordinate` holds under `placements` on `mesh`.
inline HostTensor Piece(const HostTensor& full, const DeviceMesh& mesh,
                        const std::vector<Placement>& placements,
                        const std::vector<int64_t>& coordinate) {
  absl::StatusOr<DTensorSpec> spec = MakeDTensorSpec(mesh, placements, full.shape(), full.dtype());
  EXPECT_TRUE(spec.ok()) << spec.status();
  const LocalShard shard = LocalShapeAndOffsetAt(*spec, coordinate);
  absl::StatusOr<HostTensor> piece = PackBlock(full, shard.offset, shard.shape);
  EXPECT_TRUE(piece.ok()) << piece.status();
  return *std::move(piece);
}

// Every element of `got` within `tolerance` (relative, and absolute near 0) of `want`.
inline ::testing::AssertionResult Near(const HostTensor& got, const HostTensor& want,
                                       double tolerance) {
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure()
           << "shape " << ShapeToString(got.shape()) << ", want " << ShapeToString(want.shape());
  }
  const Values g = ToValues(got), w = ToValues(want);
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - w[i]) <= tolerance * (1 + std::abs(w[i])))) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << ShapeToString(got.shape()) << " is " << g[i]
             << ", want " << w[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// Workers: one executor and store per rank, run on threads

struct Worker {
  // A worker on TestDevice() whose store has `budget` bytes; `kernels` is null (and the reason in
  // `unavailable`) where the device has no rank `id` (fewer GPUs than ranks).
  Worker(int64_t id, gloo::rendezvous::Store* rendezvous, int64_t budget) {
    absl::StatusOr<std::unique_ptr<kernels::KernelBackend>> made = TestBackendForRank(id);
    if (!made.ok()) {
      unavailable = made.status();
      return;
    }
    kernels = *std::move(made);
    store = std::make_unique<ShardStore>(budget, *kernels);
    executor =
        std::make_unique<CommandExecutor>(id, kernels.get(), store.get(), rendezvous, "127.0.0.1");
  }
  absl::Status unavailable;
  std::unique_ptr<kernels::KernelBackend> kernels;
  std::unique_ptr<ShardStore> store;
  std::unique_ptr<CommandExecutor> executor;
};

struct Outcome {
  absl::Status status;
  v1::CommandReply reply;
};

// The workers of one mesh with its communicators set up; worker r is mesh rank r, its store's
// budget `budget` bytes.
class Cluster {
 public:
  explicit Cluster(DeviceMesh mesh, int64_t budget = int64_t{1} << 30) : mesh_(std::move(mesh)) {
    for (int64_t r = 0; r < mesh_.size(); ++r) {
      workers_.push_back(std::make_unique<Worker>(r, &rendezvous_, budget));
      // A mesh larger than the GPUs here cannot run (scripts/run-gpu-checks.sh filters those out).
      if (unavailable_.ok() && !workers_.back()->unavailable.ok()) {
        unavailable_ = workers_.back()->unavailable;
        ADD_FAILURE() << "rank " << r << " on " << TestDevice() << ": " << unavailable_;
      }
    }
    for (const Outcome& o : OnEveryRank([&](int) {
           v1::Command command;
           v1::SetupMesh* setup = command.mutable_setup_mesh();
           setup->set_mesh_id(kMeshId);
           *setup->mutable_mesh() = ToProto(mesh_);
           setup->set_store_prefix("mesh/");
           setup->set_timeout_ms(absl::ToInt64Milliseconds(kTimeout));
           return command;
         })) {
      EXPECT_TRUE(o.status.ok()) << o.status;
    }
  }

  // Runs command(rank) on every rank at once; each rank's outcome.
  std::vector<Outcome> OnEveryRank(const std::function<v1::Command(int)>& command) {
    std::vector<Outcome> out(workers_.size());
    if (!unavailable_.ok()) {
      for (Outcome& o : out) o.status = unavailable_;
      return out;
    }
    std::vector<v1::Command> commands;
    for (int r = 0; r < size(); ++r) commands.push_back(command(r));
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) {
      threads.emplace_back(
          [&, r] { out[r].status = workers_[r]->executor->Execute(commands[r], &out[r].reply); });
    }
    for (std::thread& t : threads) t.join();
    return out;
  }

  int size() const { return static_cast<int>(workers_.size()); }
  const DeviceMesh& mesh() const { return mesh_; }
  std::vector<int64_t> coordinate(int r) const { return mesh_.CoordinateOfIndex(r); }
  // Rank r's store; an empty one where the rank has no worker (every command fails then anyway).
  ShardStore& store(int r) {
    if (workers_[r]->store != nullptr) return *workers_[r]->store;
    static kernels::CpuBackend* const memory = new kernels::CpuBackend();
    if (absent_ == nullptr) absent_ = std::make_unique<ShardStore>(0, *memory);
    return *absent_;
  }

 private:
  const DeviceMesh mesh_;
  absl::Status unavailable_;  // why a rank has no worker here; every command fails with it
  std::unique_ptr<ShardStore> absent_;  // the store of a rank without a worker
  gloo::rendezvous::HashStore rendezvous_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

inline DeviceMesh Mesh(Shape shape) {
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create(TestDevice(), std::move(shape), {}, {});
  EXPECT_TRUE(mesh.ok()) << mesh.status();
  return *std::move(mesh);
}

inline std::vector<ParameterTensors> NamesFor(const Program& p) {
  std::vector<ParameterTensors> names;
  for (const ProgramParameter& param : p.parameters) {
    names.push_back({"p/" + param.fqn, "g/" + param.fqn, "m/" + param.fqn});
  }
  return names;
}

// The options of one RunProgram.
struct RunOptions {
  bool train = false;
  std::optional<HostTensor> dy = std::nullopt;  // full output gradient; none: loss_sum
  std::optional<SgdOptions> sgd = std::nullopt;
};

inline v1::Command RunCommand(const Cluster& cluster, const Program& p, int r,
                              const HostTensor& input, const RunOptions& options) {
  v1::Command command;
  v1::RunProgram* run = command.mutable_run_program();
  run->set_mesh_id(kMeshId);
  run->set_program_id(kProgramId);
  const std::vector<int64_t> coord = cluster.coordinate(r);
  *run->mutable_input() = ToProto(Piece(
      input, cluster.mesh(), EdgePlacements(cluster.mesh(), p, p.input_layout.placement), coord));
  run->set_return_output(true);
  run->set_train(options.train);
  if (options.train && options.dy.has_value()) {
    *run->mutable_grad_output() =
        ToProto(Piece(*options.dy, cluster.mesh(),
                      EdgePlacements(cluster.mesh(), p, p.output_layout.placement), coord));
  } else if (options.train) {
    run->set_loss_sum(true);
  }
  if (options.sgd.has_value()) {
    run->mutable_sgd()->set_lr(options.sgd->lr);
    run->mutable_sgd()->set_momentum(options.sgd->momentum);
    run->mutable_sgd()->set_weight_decay(options.sgd->weight_decay);
  }
  return command;
}

// Stores every rank's piece of each parameter (`params`, full, in `dtype`) and loads `program`.
inline ::testing::AssertionResult LoadEverywhere(Cluster& cluster, const Program& program,
                                                 const std::vector<HostTensor>& params,
                                                 DType dtype) {
  const std::vector<ParameterTensors> names = NamesFor(program);
  for (int r = 0; r < cluster.size(); ++r) {
    for (size_t i = 0; i < params.size(); ++i) {
      const HostTensor piece = Piece(InDType(params[i], dtype), cluster.mesh(),
                                     program.parameters[i].placements, cluster.coordinate(r));
      if (absl::Status s = cluster.store(r).PutHost(names[i].tensor, piece); !s.ok()) {
        return ::testing::AssertionFailure() << s;
      }
    }
  }
  for (const Outcome& o : cluster.OnEveryRank([&](int) {
         v1::Command command;
         v1::LoadProgram* load = command.mutable_load_program();
         load->set_mesh_id(kMeshId);
         load->set_program_id(kProgramId);
         *load->mutable_program() = ToProto(program, names);
         return command;
       })) {
    if (!o.status.ok()) return ::testing::AssertionFailure() << "loading: " << o.status;
  }
  return ::testing::AssertionSuccess();
}

// Runs the program on every rank; fails the test unless every rank succeeds.
inline std::vector<Outcome> RunEverywhere(Cluster& cluster, const Program& program,
                                          const HostTensor& input, const RunOptions& options) {
  std::vector<Outcome> out =
      cluster.OnEveryRank([&](int r) { return RunCommand(cluster, program, r, input, options); });
  for (int r = 0; r < cluster.size(); ++r) EXPECT_TRUE(out[r].status.ok()) << out[r].status;
  return out;
}

// Every rank's output in its reply is its piece of `want` (full).
inline void ExpectOutputs(const Cluster& cluster, const Program& program,
                          const std::vector<Outcome>& outcomes, const HostTensor& want,
                          double tolerance) {
  for (int r = 0; r < cluster.size(); ++r) {
    if (!outcomes[r].status.ok()) continue;
    absl::StatusOr<HostTensor> got = FromProto(outcomes[r].reply.output());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->dtype(), program.output_dtype);
    const HostTensor piece =
        Piece(want, cluster.mesh(),
              EdgePlacements(cluster.mesh(), program, program.output_layout.placement),
              cluster.coordinate(r));
    EXPECT_TRUE(Near(*got, piece, tolerance)) << "output of rank " << r;
  }
}

// Every rank holds its piece of each `want[i]` (full) under the name `name(i)`.
inline void ExpectStored(Cluster& cluster, const Program& program,
                         const std::vector<HostTensor>& want,
                         const std::function<std::string(const ParameterTensors&)>& name,
                         double tolerance) {
  const std::vector<ParameterTensors> names = NamesFor(program);
  for (int r = 0; r < cluster.size(); ++r) {
    for (size_t i = 0; i < want.size(); ++i) {
      absl::StatusOr<HostTensor> got = cluster.store(r).GetHost(name(names[i]));
      ASSERT_TRUE(got.ok()) << got.status();
      const HostTensor piece =
          Piece(want[i], cluster.mesh(), program.parameters[i].placements, cluster.coordinate(r));
      EXPECT_TRUE(Near(*got, piece, tolerance)) << name(names[i]) << " on rank " << r;
    }
  }
}

inline std::string GradName(const ParameterTensors& n) { return n.grad; }
inline std::string ValueName(const ParameterTensors& n) { return n.tensor; }
inline std::string MomentumName(const ParameterTensors& n) { return n.momentum; }

inline HostTensor Ones(const Shape& shape) {
  return Float64(shape, Values(NumElements(shape), 1.0));
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_PROGRAM_CLUSTER_H_

// Uses the installed client through <tessera/tessera.h> alone. With no argument it works offline
// on the sharding model: a layout and a redistribute plan, checked against numbers worked out by
// hand (docs/dtensors.md, "Semantics"). With a coordinator's address it also distributes a tensor
// over a mesh of 2 workers, redistributes it, runs an all_reduce on local tensors, and checks what
// comes back.
//   tessera_consumer [HOST:PORT]

#include <tessera/tessera.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace tc = tessera::client;
using tessera::DType;
using tessera::HostTensor;
using tessera::Placement;

int failures = 0;

void Expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// [2, 5] on a (2, 2) mesh as (S(1), S(1)): local shapes and offsets (2,2)@(0,0) (2,1)@(0,2)
// (2,1)@(0,3) (2,1)@(0,4), and (S(1), S(1)) -> (S(1), S(0)) as one all_to_all on mesh dim 1.
void Offline() {
  absl::StatusOr<tessera::DeviceMesh> mesh =
      tessera::DeviceMesh::Create("cpu", {2, 2}, {"dp", "tp"});
  absl::StatusOr<std::vector<Placement>> placements = tessera::ParsePlacements("S(1),S(1)");
  if (!mesh.ok() || !placements.ok()) return Expect(false, "mesh and placements");
  absl::StatusOr<tessera::DTensorSpec> spec =
      tessera::MakeDTensorSpec(*mesh, *placements, {2, 5}, DType::kFloat32);
  if (!spec.ok()) return Expect(false, spec.status().ToString());
  const std::vector<tessera::LocalShard> want = {
      {{2, 2}, {0, 0}}, {{2, 1}, {0, 2}}, {{2, 1}, {0, 3}}, {{2, 1}, {0, 4}}};
  for (int64_t rank = 0; rank < 4; ++rank) {
    absl::StatusOr<tessera::LocalShard> got = tessera::LocalShapeAndOffset(*spec, rank);
    Expect(got.ok() && *got == want[rank],
           "rank " + std::to_string(rank) + " holds " +
               (got.ok() ? tessera::ShapeToString(got->shape) : got.status().ToString()));
  }
  absl::StatusOr<tessera::RedistributePlan> plan =
      tessera::PlanRedistribute(*spec, {tc::Shard(1), tc::Shard(0)});
  Expect(plan.ok() && plan->steps.size() == 1 &&
             plan->steps[0].collective == tessera::Collective::kAllToAll &&
             plan->steps[0].mesh_dim == 1,
         "(S(1), S(1)) -> (S(1), S(0)) is one all_to_all on mesh dim 1");
  const tc::CollectiveRequest request =
      tc::AllReduce(tc::Mesh{"grid", *mesh}["tp"], "x", "y", tessera::ReduceOp::kMax);
  Expect(request.op == tc::CollectiveOp::kAllReduce && request.group.mesh == "grid" &&
             request.group.dim == "tp" && request.reduce_op == tessera::ReduceOp::kMax,
         "all_reduce over mesh[\"tp\"]");
}

HostTensor Iota(int64_t rows, int64_t cols, float start) {
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) values[i] = start + static_cast<float>(i);
  return HostTensor::FromValues(DType::kFloat32, {rows, cols}, values);
}

void Online(const std::string& address) {
  absl::StatusOr<std::shared_ptr<tc::Session>> session = tc::Session::Connect(address);
  if (!session.ok()) return Expect(false, session.status().ToString());
  tc::Session& s = **session;
  absl::StatusOr<std::vector<tc::WorkerInfo>> workers = s.ListWorkers();
  Expect(workers.ok() && workers->size() == 2, "2 workers registered");
  absl::StatusOr<tc::MeshInfo> mesh = tc::InitDeviceMesh(s, "cpu", {2}, {"x"}, "consumer");
  if (!mesh.ok()) return Expect(false, mesh.status().ToString());

  const HostTensor full = Iota(5, 3, 1);
  absl::StatusOr<tc::DTensor> t = tc::DistributeTensor(s, full, *mesh, {tc::Shard(0)});
  if (!t.ok()) return Expect(false, t.status().ToString());
  absl::StatusOr<HostTensor> rank1 = t->ToLocal(1);
  Expect(rank1.ok() && rank1->shape() == tessera::Shape{2, 3} &&
             std::memcmp(rank1->data(), full.data() + 9 * sizeof(float), 6 * sizeof(float)) == 0,
         "rank 1 holds rows 3 and 4");
  absl::StatusOr<tc::DTensor> r = t->Redistribute({tc::Replicate()});
  absl::StatusOr<HostTensor> back = r.ok() ? r->FullTensor() : r.status();
  Expect(back.ok() && back->BitEqual(full), "S(0) -> R comes back whole");
  Expect(r.ok() && r->plan().steps.size() == 1 &&
             r->plan().steps[0].collective == tessera::Collective::kAllGather,
         "by one all_gather");

  const HostTensor a = Iota(2, 2, 0), b = Iota(2, 2, 10);
  absl::Status put = s.PutLocal("consumer", 0, "v", a);
  if (put.ok()) put = s.PutLocal("consumer", 1, "v", b);
  absl::StatusOr<tc::CollectiveResult> sum = s.RunCollective(tc::AllReduce((*mesh)["x"], "v"));
  absl::StatusOr<HostTensor> got = s.GetLocal("consumer", 1, "v");
  Expect(put.ok() && sum.ok() && got.ok() && got->data_as<float>()[3] == 3 + 13,
         "all_reduce of local tensors");
  Expect(s.DeleteMesh("consumer").ok(), "mesh deleted");
}

}  // namespace

int main(int argc, char** argv) {
  Offline();
  if (argc > 1) Online(argv[1]);
  std::printf("%s\n", failures == 0 ? "tessera consumer: ok" : "tessera consumer: FAILED");
  return failures == 0 ? 0 : 1;
}

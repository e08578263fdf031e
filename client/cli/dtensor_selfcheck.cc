#include "client/cli/dtensor_selfcheck.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/backend.h"
#include "kernels/run_op.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

using client::DTensor;

// Largest |a - b| relative to max(1, |b|) over the elements of two float32 tensors.
double MaxRelativeError(const HostTensor& a, const HostTensor& b) {
  const float* x = reinterpret_cast<const float*>(a.data());
  const float* y = reinterpret_cast<const float*>(b.data());
  double worst = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    worst = std::max(worst, std::abs(double{x[i]} - y[i]) / std::max(1.0, std::abs(double{y[i]})));
  }
  return worst;
}

absl::StatusOr<HostTensor> Reference(kernels::KernelBackend& cpu, OpKind kind,
                                     std::vector<const HostTensor*> inputs,
                                     std::vector<int> dims = {}) {
  OpCall op;
  op.kind = kind;
  op.dims = std::move(dims);
  std::vector<Shape> shapes;
  for (const HostTensor* t : inputs) shapes.push_back(t->shape());
  return kernels::RunLocalOp(cpu, op, inputs, shapes);
}

std::string Moves(const DTensor& t) {
  std::string s;
  for (const client::InputRedistribution& r : t.redistributions()) {
    absl::StrAppend(&s, " [", r.input, ": ", PlacementsToString(r.from), " -> ",
                    PlacementsToString(r.to), "]");
  }
  return s.empty() ? " (no redistribution)" : s;
}

// Prints how far `t` is from `want`; a failure in `failures` past 1e-4 or if `t` cannot be read.
void Check(const std::string& what, const DTensor& t, const HostTensor& want,
           std::vector<std::string>& failures, std::ostream& out) {
  absl::StatusOr<HostTensor> got = t.FullTensor();
  if (!got.ok()) {
    failures.push_back(absl::StrCat(what, ": ", got.status().message()));
    return;
  }
  const double err = got->shape() == want.shape() ? MaxRelativeError(*got, want) : INFINITY;
  out << absl::StrFormat("  %-40s %-16s %-12s max rel err %.1e%s\n", what,
                         ShapeToString(want.shape()), PlacementsToString(t.placements()), err,
                         Moves(t));
  if (!(err <= 1e-4)) failures.push_back(absl::StrCat(what, " differs: max rel err ", err));
}

// The workload's DTensors: the self-check holds them to its end, when they are freed in reverse.
struct Workload {
  absl::StatusOr<DTensor> dx, w1, w2, h, a, y, yr, total, moved, loaded;
};

// Megatron MLP: y = relu(x @ w1) @ w2, w1 column-parallel and w2 row-parallel on "tp"; then y
// all-reduced over tp and summed. Returns y's reference.
absl::StatusOr<HostTensor> CheckMlp(client::Session& s, const client::MeshInfo& mesh,
                                    kernels::KernelBackend& cpu, Workload& w,
                                    std::vector<std::string>& failures, std::ostream& out) {
  const Placement S0 = Placement::Shard(0), S1 = Placement::Shard(1), R = Placement::Replicate();
  w.dx = client::Randn(s, mesh, {32, 64}, {S0, R}, 1);
  w.w1 = client::Randn(s, mesh, {64, 256}, {R, S1}, 2);
  w.w2 = client::Randn(s, mesh, {256, 64}, {R, S0}, 3);
  if (!w.dx.ok() || !w.w1.ok() || !w.w2.ok()) {
    return !w.dx.ok() ? w.dx.status() : !w.w1.ok() ? w.w1.status() : w.w2.status();
  }
  absl::StatusOr<HostTensor> fx = w.dx->FullTensor(), fw1 = w.w1->FullTensor(),
                             fw2 = w.w2->FullTensor();
  if (!fx.ok() || !fw1.ok() || !fw2.ok()) return absl::InternalError("reading the inputs failed");
  out << "DTensor workload on mesh 'tp' (2x2, dims dp, tp):\n";
  w.h = client::Mm(*w.dx, *w.w1);
  if (!w.h.ok()) return w.h.status();
  w.a = client::Relu(*w.h);
  if (!w.a.ok()) return w.a.status();
  w.y = client::Mm(*w.a, *w.w2);
  if (!w.y.ok()) return w.y.status();
  w.yr = w.y->Redistribute({S0, R});
  if (!w.yr.ok()) return w.yr.status();
  HostTensor rh = Reference(cpu, OpKind::kMm, {&*fx, &*fw1}).value();
  HostTensor ra = Reference(cpu, OpKind::kRelu, {&rh}).value();
  HostTensor ry = Reference(cpu, OpKind::kMm, {&ra, &*fw2}).value();
  Check("h = x @ w1 (column-parallel)", *w.h, rh, failures, out);
  Check("a = relu(h)", *w.a, ra, failures, out);
  Check("y = a @ w2 (row-parallel, partial)", *w.y, ry, failures, out);
  Check("y all-reduced over tp", *w.yr, ry, failures, out);
  w.total = client::Sum(*w.yr, {0});
  if (!w.total.ok()) return w.total.status();
  Check("sum(y, dim 0)", *w.total, Reference(cpu, OpKind::kSum, {&ry}, {0}).value(), failures, out);
  return ry;
}

// y moved to a new 1-D mesh 'tp-line' of the 4 workers; returns that mesh.
absl::StatusOr<client::MeshInfo> CheckMove(client::Session& s, const std::string& device,
                                           const HostTensor& ry, Workload& w,
                                           std::vector<std::string>& failures, std::ostream& out) {
  absl::StatusOr<client::MeshInfo> line = client::InitDeviceMesh(s, device, {4}, {}, "tp-line");
  if (!line.ok()) return line.status();
  w.moved = w.yr->Redistribute({Placement::Shard(1)}, "tp-line");
  if (!w.moved.ok()) return w.moved.status();
  Check("y moved to 1-D mesh 'tp-line' as S(1)", *w.moved, ry, failures, out);
  return line;
}

// A checkpoint: every worker writes its own block of y (S(0), R) on the 2x2 mesh, and the 4
// ranks of the 1-D mesh `line` read back S(0) of it, each only the bytes of its shard.
absl::Status CheckCheckpoint(client::Session& s, const client::MeshInfo& line,
                             const std::string& checkpoint_dir, Workload& w,
                             std::vector<std::string>& failures, std::ostream& out) {
  absl::StatusOr<HostTensor> saved = w.yr->FullTensor();
  if (!saved.ok()) return saved.status();
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(checkpoint_dir).parent_path(), error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the parent of ", checkpoint_dir, ": ", error.message()));
  }
  absl::StatusOr<client::SaveInfo> info = w.yr->Save(checkpoint_dir);
  if (!info.ok()) return info.status();
  w.loaded = client::LoadTensor(s, checkpoint_dir, line, {Placement::Shard(0)});
  if (!w.loaded.ok()) return w.loaded.status();
  absl::StatusOr<HostTensor> back = w.loaded->FullTensor();
  if (!back.ok()) return back.status();
  const bool same = back->shape() == saved->shape() &&
                    std::equal(back->bytes().begin(), back->bytes().end(), saved->bytes().begin());
  out << absl::StrFormat("  %-40s %-16s %-12s %s\n", "y saved, loaded on 'tp-line'",
                         ShapeToString(saved->shape()), PlacementsToString(w.loaded->placements()),
                         same ? "bit-exact" : "DIFFERS");
  out << "    checkpoint " << info->path << "/" << info->data_dir << ", " << info->files
      << " block files cut by " << info->saved_layout << "\n";
  if (!same) failures.push_back("the checkpoint of y loaded back different bytes");
  return absl::OkStatus();
}

}  // namespace

absl::Status RunDTensorSelfcheck(const std::string& address, const std::string& device,
                                 const std::string& checkpoint_dir, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::shared_ptr<client::Session>> session = client::Session::Connect(address);
  if (!session.ok()) return session.status();
  client::Session& s = **session;
  (void)s.DeleteMesh("tp");  // left over from an interrupted run, if any
  (void)s.DeleteMesh("tp-line");
  absl::StatusOr<client::MeshInfo> mesh =
      client::InitDeviceMesh(s, device, {2, 2}, {"dp", "tp"}, "tp");
  if (!mesh.ok()) return mesh.status();
  std::unique_ptr<kernels::KernelBackend> cpu = kernels::MakeBackend("cpu").value();
  std::vector<std::string> failures;
  Workload w;
  absl::StatusOr<HostTensor> ry = CheckMlp(s, *mesh, *cpu, w, failures, out);
  if (!ry.ok()) return ry.status();
  absl::StatusOr<client::MeshInfo> line = CheckMove(s, device, *ry, w, failures, out);
  if (!line.ok()) return line.status();
  if (absl::Status st = CheckCheckpoint(s, *line, checkpoint_dir, w, failures, out); !st.ok()) {
    return st;
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (void)s.DeleteMesh("tp");
  (void)s.DeleteMesh("tp-line");
  if (!failures.empty()) {
    return absl::InternalError(absl::StrCat("DTensor self-check failed: ", failures[0]));
  }
  out << absl::StrFormat("DTensor self-check passed in %.2f s\n", seconds);
  return absl::OkStatus();
}

}  // namespace tessera

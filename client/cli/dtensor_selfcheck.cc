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
  auto check = [&](const std::string& what, const DTensor& t, const HostTensor& want) {
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
  };

  // Megatron MLP: y = relu(x @ w1) @ w2, w1 column-parallel and w2 row-parallel on "tp".
  const Placement S0 = Placement::Shard(0), S1 = Placement::Shard(1), R = Placement::Replicate();
  absl::StatusOr<DTensor> dx = client::Randn(s, *mesh, {32, 64}, {S0, R}, 1);
  absl::StatusOr<DTensor> w1 = client::Randn(s, *mesh, {64, 256}, {R, S1}, 2);
  absl::StatusOr<DTensor> w2 = client::Randn(s, *mesh, {256, 64}, {R, S0}, 3);
  if (!dx.ok() || !w1.ok() || !w2.ok()) {
    return !dx.ok() ? dx.status() : !w1.ok() ? w1.status() : w2.status();
  }
  absl::StatusOr<HostTensor> fx = dx->FullTensor(), fw1 = w1->FullTensor(), fw2 = w2->FullTensor();
  if (!fx.ok() || !fw1.ok() || !fw2.ok()) return absl::InternalError("reading the inputs failed");
  out << "DTensor workload on mesh 'tp' (2x2, dims dp, tp):\n";
  absl::StatusOr<DTensor> h = client::Mm(*dx, *w1);
  if (!h.ok()) return h.status();
  absl::StatusOr<DTensor> a = client::Relu(*h);
  if (!a.ok()) return a.status();
  absl::StatusOr<DTensor> y = client::Mm(*a, *w2);
  if (!y.ok()) return y.status();
  absl::StatusOr<DTensor> yr = y->Redistribute({S0, R});
  if (!yr.ok()) return yr.status();
  HostTensor rh = Reference(*cpu, OpKind::kMm, {&*fx, &*fw1}).value();
  HostTensor ra = Reference(*cpu, OpKind::kRelu, {&rh}).value();
  HostTensor ry = Reference(*cpu, OpKind::kMm, {&ra, &*fw2}).value();
  check("h = x @ w1 (column-parallel)", *h, rh);
  check("a = relu(h)", *a, ra);
  check("y = a @ w2 (row-parallel, partial)", *y, ry);
  check("y all-reduced over tp", *yr, ry);
  absl::StatusOr<DTensor> total = client::Sum(*yr, {0});
  if (!total.ok()) return total.status();
  check("sum(y, dim 0)", *total, Reference(*cpu, OpKind::kSum, {&ry}, {0}).value());
  absl::StatusOr<client::MeshInfo> line = client::InitDeviceMesh(s, device, {4}, {}, "tp-line");
  if (!line.ok()) return line.status();
  absl::StatusOr<DTensor> moved = yr->Redistribute({Placement::Shard(1)}, "tp-line");
  if (!moved.ok()) return moved.status();
  check("y moved to 1-D mesh 'tp-line' as S(1)", *moved, ry);

  // A checkpoint: every worker writes its own block of y (S(0), R) on the 2x2 mesh, and the 4
  // ranks of the 1-D mesh read back S(0) of it, each only the bytes of its shard.
  absl::StatusOr<HostTensor> saved = yr->FullTensor();
  if (!saved.ok()) return saved.status();
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(checkpoint_dir).parent_path(), error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the parent of ", checkpoint_dir, ": ", error.message()));
  }
  absl::StatusOr<client::SaveInfo> info = yr->Save(checkpoint_dir);
  if (!info.ok()) return info.status();
  absl::StatusOr<DTensor> loaded =
      client::LoadTensor(s, checkpoint_dir, *line, {Placement::Shard(0)});
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<HostTensor> back = loaded->FullTensor();
  if (!back.ok()) return back.status();
  const bool same = back->shape() == saved->shape() &&
                    std::equal(back->bytes().begin(), back->bytes().end(), saved->bytes().begin());
  out << absl::StrFormat("  %-40s %-16s %-12s %s\n", "y saved, loaded on 'tp-line'",
                         ShapeToString(saved->shape()), PlacementsToString(loaded->placements()),
                         same ? "bit-exact" : "DIFFERS");
  out << "    checkpoint " << info->path << "/" << info->data_dir << ", " << info->files
      << " block files cut by " << info->saved_layout << "\n";
  if (!same) failures.push_back("the checkpoint of y loaded back different bytes");

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

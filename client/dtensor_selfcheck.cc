#include "client/dtensor_selfcheck.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/coordinator_client.h"
#include "client/dtensor.h"
#include "core/status_macros.h"
#include "kernels/backend.h"
#include "kernels/run_op.h"
#include "proto/convert.h"

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

// `placements` as text, or why they cannot be read.
std::string PlacementsText(const google::protobuf::RepeatedPtrField<v1::Placement>& placements) {
  absl::StatusOr<std::vector<Placement>> p = FromProto(placements);
  return p.ok() ? PlacementsToString(*p) : absl::StrCat("(", p.status().message(), ")");
}

std::string Moves(const DTensor& t) {
  std::string s;
  for (const v1::InputRedistribution& r : t.redistributions()) {
    absl::StrAppend(&s, " [", r.input(), ": ", PlacementsText(r.from_placements()), " -> ",
                    PlacementsText(r.to_placements()), "]");
  }
  return s.empty() ? " (no redistribution)" : s;
}

}  // namespace

absl::Status RunDTensorSelfcheck(const std::string& address, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::shared_ptr<client::Session> session, client::Session::Connect(address));
  client::Session& s = *session;
  ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> admin, CoordinatorClient::Connect(address));
  (void)admin->DeleteMesh("tp");  // left over from an interrupted run, if any
  (void)admin->DeleteMesh("tp-line");
  ASSIGN_OR_RETURN(client::Mesh mesh, client::InitDeviceMesh(s, "cpu", {2, 2}, {"dp", "tp"}, "tp"));
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::KernelBackend> cpu, kernels::MakeBackend("cpu"));
  std::vector<std::string> failures;
  auto check = [&](const std::string& what, const DTensor& t, const HostTensor& want) {
    absl::StatusOr<HostTensor> got = t.FullTensor();
    if (!got.ok()) {
      failures.push_back(absl::StrCat(what, ": ", got.status().message()));
      return;
    }
    const double err = got->shape() == want.shape() ? MaxRelativeError(*got, want) : INFINITY;
    out << absl::StrFormat("  %-34s %-16s %-12s max rel err %.1e%s\n", what,
                           ShapeToString(want.shape()), PlacementsToString(t.placements()), err,
                           Moves(t));
    if (!(err <= 1e-4)) failures.push_back(absl::StrCat(what, " differs: max rel err ", err));
  };

  // Megatron MLP: y = relu(x @ w1) @ w2, w1 column-parallel and w2 row-parallel on "tp".
  const Placement S0 = Placement::Shard(0), S1 = Placement::Shard(1), R = Placement::Replicate();
  ASSIGN_OR_RETURN(DTensor dx, client::Randn(s, mesh, {32, 64}, {S0, R}, 1));
  ASSIGN_OR_RETURN(DTensor w1, client::Randn(s, mesh, {64, 256}, {R, S1}, 2));
  ASSIGN_OR_RETURN(DTensor w2, client::Randn(s, mesh, {256, 64}, {R, S0}, 3));
  absl::StatusOr<HostTensor> fx = dx.FullTensor(), fw1 = w1.FullTensor(), fw2 = w2.FullTensor();
  if (!fx.ok() || !fw1.ok() || !fw2.ok()) return absl::InternalError("reading the inputs failed");
  out << "DTensor workload on mesh 'tp' (2x2, dims dp, tp):\n";
  ASSIGN_OR_RETURN(DTensor h, client::Mm(dx, w1));
  ASSIGN_OR_RETURN(DTensor a, client::Relu(h));
  ASSIGN_OR_RETURN(DTensor y, client::Mm(a, w2));
  ASSIGN_OR_RETURN(DTensor yr, y.Redistribute({S0, R}));
  ASSIGN_OR_RETURN(HostTensor rh, Reference(*cpu, OpKind::kMm, {&*fx, &*fw1}));
  ASSIGN_OR_RETURN(HostTensor ra, Reference(*cpu, OpKind::kRelu, {&rh}));
  ASSIGN_OR_RETURN(HostTensor ry, Reference(*cpu, OpKind::kMm, {&ra, &*fw2}));
  check("h = x @ w1 (column-parallel)", h, rh);
  check("a = relu(h)", a, ra);
  check("y = a @ w2 (row-parallel, partial)", y, ry);
  check("y all-reduced over tp", yr, ry);
  ASSIGN_OR_RETURN(DTensor total, client::Sum(yr, {0}));
  ASSIGN_OR_RETURN(HostTensor total_reference, Reference(*cpu, OpKind::kSum, {&ry}, {0}));
  check("sum(y, dim 0)", total, total_reference);
  ASSIGN_OR_RETURN(client::Mesh line, client::InitDeviceMesh(s, "cpu", {4}, {}, "tp-line"));
  ASSIGN_OR_RETURN(DTensor moved, yr.Redistribute({Placement::Shard(1)}, "tp-line"));
  check("y moved to 1-D mesh 'tp-line' as S(1)", moved, ry);

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (void)admin->DeleteMesh("tp");
  (void)admin->DeleteMesh("tp-line");
  if (!failures.empty()) {
    return absl::InternalError(absl::StrCat("DTensor self-check failed: ", failures[0]));
  }
  out << absl::StrFormat("DTensor self-check passed in %.2f s\n", seconds);
  return absl::OkStatus();
}

}  // namespace tessera

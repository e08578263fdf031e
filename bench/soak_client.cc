#include "bench/soak_client.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/small_integer_tensor.h"
#include "kernels/backend.h"
#include "kernels/run_op.h"
#include "kernels/testing/reference.h"

namespace tessera::soak {

void SoakTally::Unexpected(std::string what) {
  std::lock_guard<std::mutex> lock(mu);
  unexpected.push_back(std::move(what));
}

void SoakTally::Count(std::map<std::string, int64_t> SoakTally::*which, absl::StatusCode code) {
  std::lock_guard<std::mutex> lock(mu);
  ++(this->*which)[absl::StatusCodeToString(code)];
}

namespace {

using client::DTensor;
using client::Mesh;

// Empty iff `got` equals `want` within |a-b| <= abs + rel*max(|a|,|b|) elementwise (0, 0: bytes).
std::string Mismatch(const HostTensor& got, const HostTensor& want, double rel, double abs) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) {
    return absl::StrCat("got ", DTypeName(got.dtype()), ShapeToString(got.shape()), ", want ",
                        DTypeName(want.dtype()), ShapeToString(want.shape()));
  }
  const size_t size = DTypeSize(got.dtype());
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    if (std::memcmp(got.data() + i * size, want.data() + i * size, size) == 0) continue;
    const double a = kernels::testing::GetDouble(got, i);
    const double b = kernels::testing::GetDouble(want, i);
    if (std::abs(a - b) <= abs + rel * std::max(std::abs(a), std::abs(b))) continue;
    return absl::StrCat("differs at flat index ", i, ": got ", a, ", want ", b);
  }
  return "";
}

// A tensor a client holds and what it must read back as.
struct Held {
  DTensor tensor;
  std::shared_ptr<const HostTensor> full;
  const Mesh* mesh = nullptr;
  double rel = 0, abs = 0;  // tolerance of the comparison (0: bit for bit)
  // Read back whole before the phase's fault began: acknowledged. After a coordinator restart such
  // a tensor must read back again, bit for bit (its record was durable before that first read).
  bool acknowledged = false;
  absl::StatusCode last_read = absl::StatusCode::kOk;
};

class Client {
 public:
  Client(const SoakClientOptions& o, const SoakMeshes& m, SoakTally& t, SoakSignals& s,
         SoakProgress& p)
      : o_(o), meshes_(m), tally_(t), signals_(s), progress_(p), rng_(o.seed) {}

  void Run() {
    client::SessionOptions options;
    options.timeout = o_.call_timeout;
    options.op_stream = o_.op_stream;
    absl::StatusOr<std::shared_ptr<client::Session>> session =
        client::Session::Connect(o_.address, options);
    if (!session.ok()) {
      tally_.Unexpected(
          absl::StrCat("client ", o_.index, " connect: ", session.status().ToString()));
      return;
    }
    session_ = *session;
    cpu_ = kernels::MakeBackend("cpu").value();
    for (int64_t i = 0; i < o_.calls && !signals_.abort; ++i) {
      OneCall();
      progress_.done.fetch_add(1);
    }
    Begin("final reads and frees");
    for (Held& h : held_) {
      bool read = Read(h, "final read");
      // An acknowledged tensor while the restarted coordinator still recovers: read it again.
      for (int i = 0; i < 100 && !read && KeepForLater(h); ++i) {
        absl::SleepFor(absl::Milliseconds(100));
        read = Read(h, "final read");
      }
      if (read) Free(h);
    }
    held_.clear();
    Begin("done");
  }

 private:
  bool Faulted() const { return o_.fault != Fault::kNone && signals_.fault_started; }
  bool Touches(const Mesh& m) const {
    return o_.fault == Fault::kCoordinator ||
           (o_.fault == Fault::kWorkerLoss && &m != &meshes_.pair);
  }
  // Whether a failed valid call on `m` is one the fault explains.
  bool FaultExplains(const Mesh& m, absl::StatusCode code) const {
    if (!Faulted() || !Touches(m)) return false;
    if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDataLoss) return true;
    return o_.fault == Fault::kCoordinator &&
           (code == absl::StatusCode::kNotFound || code == absl::StatusCode::kFailedPrecondition);
  }

  // Whether a read of `h` that failed should be tried again later instead of dropping `h`: an
  // acknowledged tensor that answered UNAVAILABLE while the coordinator was down or recovering.
  bool KeepForLater(const Held& h) const {
    return o_.fault == Fault::kCoordinator && h.acknowledged &&
           h.last_read == absl::StatusCode::kUnavailable;
  }

  // While the coordinator is down, waits until it is back with its meshes, as a client retrying
  // with backoff would, so that the calls after the restart test it rather than the outage.
  void AwaitCoordinator() {
    if (o_.fault != Fault::kCoordinator) return;
    Begin("waiting for the coordinator");
    while (!signals_.meshes_back && !signals_.abort) absl::SleepFor(absl::Milliseconds(50));
  }

  void Begin(std::string what) {
    std::lock_guard<std::mutex> lock(progress_.mu);
    progress_.current = std::move(what);
    progress_.since = absl::Now();
  }

  // Tallies a valid call; true iff it succeeded (the caller then checks the value).
  bool Valid(const std::string& what, const Mesh& m, const absl::Status& s) {
    tally_.calls.fetch_add(1);
    if (s.ok()) {
      tally_.ok.fetch_add(1);
      if (Faulted()) tally_.ok_after_fault.fetch_add(1);
      return true;
    }
    if (FaultExplains(m, s.code())) {
      tally_.Count(&SoakTally::fault_failures, s.code());
      AwaitCoordinator();
    } else {
      tally_.Unexpected(
          absl::StrCat("client ", o_.index, " ", what, " on ", m.name, ": ", s.ToString()));
    }
    return false;
  }

  // Tallies a call that must be refused with `want`.
  void Invalid(const std::string& what, const Mesh& m, const absl::Status& s,
               absl::StatusCode want) {
    tally_.calls.fetch_add(1);
    if (s.code() == want) {
      tally_.Count(&SoakTally::refused_as_expected, want);
    } else if (!s.ok() && FaultExplains(m, s.code())) {
      tally_.Count(&SoakTally::fault_failures, s.code());
    } else {
      tally_.Unexpected(absl::StrCat("client ", o_.index, " invalid ", what, " on ", m.name,
                                     ": want ", absl::StatusCodeToString(want), ", got ",
                                     s.ToString()));
    }
  }

  void Check(const std::string& what, const HostTensor& got, const Held& h) {
    tally_.checked.fetch_add(1);
    const std::string diff = Mismatch(got, *h.full, h.rel, h.abs);
    if (!diff.empty()) {
      tally_.Unexpected(absl::StrCat("client ", o_.index, " WRONG BYTES ", what, " of ",
                                     h.tensor.name(), " on ", h.mesh->name, ": ", diff));
    }
  }

  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  const Mesh& PickMesh() {
    const Mesh* all[] = {&meshes_.line, &meshes_.grid, &meshes_.pair};
    return *all[Pick(3)];
  }
  Shape PickShape(int rank) {
    Shape s;
    for (int d = 0; d < rank; ++d) s.push_back(1 + Pick(8));
    return s;
  }
  std::vector<Placement> PickPlacements(const Mesh& m, int rank) {
    std::vector<Placement> p;
    for (int d = 0; d < m.mesh.ndim(); ++d) {
      const int k = Pick(rank + 1);
      p.push_back(k == rank ? Placement::Replicate() : Placement::Shard(k));
    }
    return p;
  }
  std::string Name(const char* what) {
    return absl::StrCat("soak", o_.index, "_", what, serial_++);
  }

  // Distributes a fresh tensor; the held tensor, or nullptr when the call failed.
  Held* Distribute(const Mesh& m, DType dtype, const Shape& shape) {
    auto full = std::make_shared<const HostTensor>(
        SmallIntegerTensor(dtype, shape, static_cast<uint32_t>(rng_())));
    const std::vector<Placement> p = PickPlacements(m, static_cast<int>(shape.size()));
    Begin(absl::StrCat("distribute ", ShapeToString(shape), " ", PlacementsToString(p)));
    absl::StatusOr<DTensor> t = client::DistributeTensor(*session_, *full, m, p);
    if (!Valid("distribute", m, t.status())) return nullptr;
    held_.push_back({*std::move(t), std::move(full), &m});
    return &held_.back();
  }

  // Reads `h` back and checks it; false iff the read failed.
  bool Read(Held& h, const char* what) {
    Begin(absl::StrCat(what, " ", h.tensor.name()));
    absl::StatusOr<HostTensor> got = h.tensor.FullTensor();
    h.last_read = got.status().code();
    // Nothing acknowledged is lost across a coordinator restart: such a tensor may only be
    // unavailable for a while.
    if (o_.fault == Fault::kCoordinator && h.acknowledged && !got.ok() &&
        got.status().code() != absl::StatusCode::kUnavailable) {
      tally_.calls.fetch_add(1);
      tally_.lost_acknowledged.fetch_add(1);
      tally_.Unexpected(absl::StrCat("client ", o_.index, " ACKNOWLEDGED TENSOR LOST ", what,
                                     " of ", h.tensor.name(), " on ", h.mesh->name, ": ",
                                     got.status().ToString()));
      return false;
    }
    if (!Valid(what, *h.mesh, got.status())) {
      if (Faulted() && o_.fault == Fault::kWorkerLoss) tally_.lost_acknowledged.fetch_add(1);
      return false;
    }
    Check(what, *got, h);
    if (h.acknowledged && Faulted()) tally_.read_back_after_fault.fetch_add(1);
    if (!Faulted()) h.acknowledged = true;
    return true;
  }

  void Free(Held& h) {
    Begin(absl::StrCat("free ", h.tensor.name()));
    Valid("free", *h.mesh, h.tensor.Free());
  }

  void OneCall() {
    // Keep what a client holds bounded, so that memory at the end measures leaks, not load.
    if (held_.size() > 6) {
      const int i = Pick(static_cast<int>(held_.size()));
      Free(held_[i]);
      held_.erase(held_.begin() + i);
      return;
    }
    const int kind = Pick(100);
    if (kind < 20 || held_.empty()) {
      const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32};
      Distribute(PickMesh(), dtypes[Pick(4)], PickShape(1 + Pick(3)));
    } else if (kind < 35) {
      Held& h = held_[Pick(static_cast<int>(held_.size()))];
      if (!Read(h, "full_tensor") && !KeepForLater(h)) {
        held_.erase(held_.begin() + (&h - held_.data()));
      }
    } else if (kind < 47) {
      Redistribute();
    } else if (kind < 65) {
      Op();
    } else if (kind < 75) {
      Collective();
    } else if (kind < 85) {
      const int i = Pick(static_cast<int>(held_.size()));
      Free(held_[i]);
      held_.erase(held_.begin() + i);
    } else {
      Refused();
    }
  }

  void Redistribute() {
    Held& h = held_[Pick(static_cast<int>(held_.size()))];
    const std::vector<Placement> p = PickPlacements(*h.mesh, static_cast<int>(h.full->rank()));
    Begin(absl::StrCat("redistribute ", h.tensor.name(), " to ", PlacementsToString(p)));
    absl::StatusOr<DTensor> t = h.tensor.Redistribute(p);
    if (!Valid("redistribute", *h.mesh, t.status())) return;
    Held out{*std::move(t), h.full, h.mesh, h.rel, h.abs};
    if (Chance(0.5)) {
      if (!Read(out, "full_tensor after redistribute")) return;
    }
    held_.push_back(std::move(out));
  }

  // An op on one or two inputs, its output checked against kernels::RunLocalOp on the cpu.
  void Op() {
    const DType dtypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16};
    const DType dtype = dtypes[Pick(3)];
    const Mesh& m = PickMesh();
    OpCall op;
    std::vector<Held*> inputs;
    const int which = Pick(6);
    if (which == 0) {  // mm
      op.kind = OpKind::kMm;
      const Shape a{1 + Pick(8), 1 + Pick(8)};
      const Shape b{a[1], 1 + Pick(8)};
      inputs.push_back(Distribute(m, dtype, a));
      inputs.push_back(inputs[0] != nullptr ? Distribute(m, dtype, b) : nullptr);
    } else if (which <= 2) {  // add, sub, mul of equal shapes
      const OpKind kinds[] = {OpKind::kAdd, OpKind::kSub, OpKind::kMul};
      op.kind = kinds[Pick(3)];
      const Shape s = PickShape(1 + Pick(3));
      inputs.push_back(Distribute(m, dtype, s));
      inputs.push_back(inputs[0] != nullptr ? Distribute(m, dtype, s) : nullptr);
    } else {  // relu, sum over a dim, transpose, cast
      const int rank = 2 + Pick(2);
      inputs.push_back(Distribute(m, dtype, PickShape(rank)));
      const int unary = Pick(4);
      op.kind = unary == 0   ? OpKind::kRelu
                : unary == 1 ? OpKind::kSum
                : unary == 2 ? OpKind::kTranspose
                             : OpKind::kCast;
      if (op.kind == OpKind::kSum) op.dims = {Pick(rank)};
      if (op.kind == OpKind::kTranspose) op.dim0 = 0, op.dim1 = rank - 1;
      if (op.kind == OpKind::kCast) op.dtype = DType::kFloat64;
    }
    if (std::find(inputs.begin(), inputs.end(), nullptr) != inputs.end()) return;
    // Distribute may have moved earlier entries of held_: take what is needed now.
    std::vector<DTensor> tensors;
    std::vector<std::shared_ptr<const HostTensor>> fulls;
    const size_t first = held_.size() - inputs.size();
    for (size_t i = first; i < held_.size(); ++i) {
      tensors.push_back(held_[i].tensor);
      fulls.push_back(held_[i].full);
    }
    std::vector<const HostTensor*> ptrs;
    std::vector<Shape> shapes;
    for (const auto& f : fulls) ptrs.push_back(f.get()), shapes.push_back(f->shape());
    absl::StatusOr<HostTensor> want = kernels::RunLocalOp(*cpu_, op, ptrs, shapes);
    if (!want.ok()) {
      tally_.Unexpected(
          absl::StrCat("reference of ", OpKindName(op.kind), ": ", want.status().ToString()));
      return;
    }
    Begin(absl::StrCat("op ", OpKindName(op.kind), " on ", m.name));
    absl::StatusOr<DTensor> out = client::RunOp(op, tensors);
    if (!Valid(absl::StrCat("op ", OpKindName(op.kind)), m, out.status())) return;
    // bfloat16 sums of partial products round at every step, in the order the layout gives.
    const bool rough = dtype == DType::kBFloat16;
    Held h{*std::move(out), std::make_shared<const HostTensor>(*std::move(want)), &m,
           rough ? 2e-2 : 0, rough ? 4.0 : 0};
    if (!Read(h, "full_tensor of op")) return;
    held_.push_back(std::move(h));
  }

  // An all_reduce over a whole mesh of local tensors put on every rank, one rank read back.
  void Collective() {
    const Mesh& m = PickMesh();
    const DType dtype = Chance(0.5) ? DType::kFloat32 : DType::kInt32;
    const ReduceOp reduce = Chance(0.5) ? ReduceOp::kSum : ReduceOp::kMax;
    const Shape shape = PickShape(1 + Pick(2));
    const std::string in = Name("x"), out = Name("y");
    const uint32_t seed = static_cast<uint32_t>(rng_());
    HostTensor want = SmallIntegerTensor(dtype, shape, seed);
    const int64_t ranks = m.mesh.size();
    bool put = true;
    for (int64_t r = 0; r < ranks && put; ++r) {
      HostTensor local = SmallIntegerTensor(dtype, shape, seed + static_cast<uint32_t>(r));
      if (r > 0) ReduceInto(reduce, dtype, want.data(), local.data(), want.num_elements());
      Begin(absl::StrCat("put_local ", in, " rank ", r, " on ", m.name));
      put = Valid("put_local", m, session_->PutLocal(m.name, r, in, local));
    }
    if (put) {
      Begin(absl::StrCat("all_reduce ", in, " on ", m.name));
      const absl::Status reduced =
          session_->RunCollective(client::AllReduce(m.group(), in, out, reduce)).status();
      if (Valid("all_reduce", m, reduced)) {
        const int64_t rank = Pick(static_cast<int>(ranks));
        Begin(absl::StrCat("get_local ", out, " rank ", rank, " on ", m.name));
        absl::StatusOr<HostTensor> got = session_->GetLocal(m.name, rank, out);
        if (Valid("get_local", m, got.status())) {
          tally_.checked.fetch_add(1);
          const std::string diff = Mismatch(*got, want, 0, 0);
          if (!diff.empty()) {
            tally_.Unexpected(absl::StrCat("client ", o_.index, " WRONG BYTES all_reduce on ",
                                           m.name, " rank ", rank, ": ", diff));
          }
        }
      }
    }
    for (const std::string& name : {in, out}) {
      Begin(absl::StrCat("delete_local ", name, " on ", m.name));
      const absl::Status s = session_->DeleteLocal(m.name, name);
      // A tensor no rank wrote (the call before failed) is not there to delete.
      if (!s.ok() && s.code() == absl::StatusCode::kNotFound && !put) continue;
      if (!s.ok() && s.code() == absl::StatusCode::kNotFound && name == out) continue;
      Valid("delete_local", m, s);
    }
  }

  // A call that must be refused, with the code it must get.
  void Refused() {
    using absl::StatusCode;
    const Mesh& m = PickMesh();
    const int which = Pick(7);
    if (which == 0) {  // a placement sharding a dim the tensor lacks
      const Shape shape = PickShape(1 + Pick(2));
      std::vector<Placement> p = PickPlacements(m, static_cast<int>(shape.size()));
      p[Pick(static_cast<int>(p.size()))] = Placement::Shard(static_cast<int>(shape.size()));
      Begin("invalid distribute");
      const HostTensor full = SmallIntegerTensor(DType::kFloat32, shape, 1);
      Invalid("distribute with a placement past the tensor's dims", m,
              client::DistributeTensor(*session_, full, m, p).status(),
              StatusCode::kInvalidArgument);
    } else if (which == 1) {  // an unknown tensor
      Begin("invalid get_tensor");
      Invalid("get_tensor of an unknown tensor", m,
              client::GetTensor(*session_, Name("missing")).status(), StatusCode::kNotFound);
    } else if (which == 2) {  // an unknown local tensor
      Begin("invalid get_local");
      Invalid("get_local of an unknown tensor", m,
              session_->GetLocal(m.name, 0, Name("missing")).status(), StatusCode::kNotFound);
    } else if (which == 3) {  // an unknown mesh
      Mesh missing = m;
      missing.name = Name("nomesh");
      Begin("invalid distribute to an unknown mesh");
      const HostTensor full = SmallIntegerTensor(DType::kFloat32, {4}, 1);
      Invalid("distribute to an unknown mesh", m,
              client::DistributeTensor(*session_, full, missing, {Placement::Replicate()}).status(),
              StatusCode::kNotFound);
    } else if (held_.empty()) {
      return;
    } else if (which == 4) {  // redistribute past the tensor's dims
      Held& h = held_[Pick(static_cast<int>(held_.size()))];
      std::vector<Placement> p(h.mesh->mesh.ndim(), Placement::Shard(h.full->rank() + 1));
      Begin("invalid redistribute");
      Invalid("redistribute past the tensor's dims", *h.mesh, h.tensor.Redistribute(p).status(),
              StatusCode::kInvalidArgument);
    } else if (which == 5) {  // a rank the mesh lacks
      Held& h = held_[Pick(static_cast<int>(held_.size()))];
      Begin("invalid to_local");
      Invalid("to_local of a rank past the mesh", *h.mesh,
              h.tensor.ToLocal(h.mesh->mesh.size()).status(), StatusCode::kInvalidArgument);
    } else {  // mm of mismatched inner dims, or add of shapes that do not broadcast
      const DType dtype = DType::kFloat32;
      const bool mm = Chance(0.5);
      Held* a = Distribute(m, dtype, {2 + Pick(4), 3});
      Held* b = a != nullptr ? Distribute(m, dtype, {mm ? 4 : 5, 2}) : nullptr;
      if (b == nullptr) return;
      const DTensor x = held_[held_.size() - 2].tensor, y = held_.back().tensor;
      Begin(mm ? "invalid mm" : "invalid add");
      absl::StatusOr<DTensor> out = mm ? client::Mm(x, y) : client::Add(x, y);
      // On the op stream a refusal shows on the output's first touch.
      const absl::Status s = out.ok() ? out->Synchronize() : out.status();
      Invalid(mm ? "mm of mismatched inner dims" : "add of shapes that do not broadcast", m, s,
              StatusCode::kInvalidArgument);
    }
  }

  const SoakClientOptions& o_;
  const SoakMeshes& meshes_;
  SoakTally& tally_;
  SoakSignals& signals_;
  SoakProgress& progress_;
  std::mt19937_64 rng_;
  std::shared_ptr<client::Session> session_;
  std::unique_ptr<kernels::KernelBackend> cpu_;
  std::vector<Held> held_;
  int64_t serial_ = 0;
};

}  // namespace

void RunSoakClient(const SoakClientOptions& options, const SoakMeshes& meshes, SoakTally& tally,
                   SoakSignals& signals, SoakProgress& progress) {
  Client(options, meshes, tally, signals, progress).Run();
}

}  // namespace tessera::soak

// Every collective of the CollectiveService, run by real worker processes over Gloo and checked
// against a single-process reference: collective × reduce op × dtype, each over sizes that are
// fewer than, uneven over and even over the group, on a 1-D mesh of 4 and on both dims and the
// whole of a 2x2 mesh.

#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sharding/chunk.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/small_integer_tensor.h"
#include "gtest/gtest.h"
#include "tests/cluster/cluster_fixture.h"

namespace tessera {
namespace {

using ::tessera::client::CollectiveOp;
using ::tessera::client::CollectiveRequest;
using ::tessera::client::CollectiveResult;
using ::tessera::client::CollectiveStream;
using ::tessera::client::Session;
using ::tessera::testing::TensorsMatch;
using ::tessera::testing::TestCluster;
using ::tessera::testing::TestClusterOptions;

constexpr int kWorkers = 4;
// Dim 0 sizes of the inputs: fewer rows than ranks, uneven over groups of 2 and 4, even over both.
constexpr int64_t kRows[] = {1, 5, 8};

// One parameter: a collective, its reduce op when it reduces, and the dtype of its tensors.
struct CollectiveCase {
  CollectiveOp op = CollectiveOp::kBarrier;
  ReduceOp reduce = ReduceOp::kSum;
  DType dtype = DType::kFloat32;
};

bool Reduces(CollectiveOp op) {
  return op == CollectiveOp::kAllReduce || op == CollectiveOp::kReduce ||
         op == CollectiveOp::kReduceScatter;
}

std::vector<CollectiveCase> AllCases() {
  std::vector<CollectiveCase> cases;
  for (CollectiveOp op :
       {CollectiveOp::kBroadcast, CollectiveOp::kAllReduce, CollectiveOp::kReduce,
        CollectiveOp::kAllGather, CollectiveOp::kGather, CollectiveOp::kScatter,
        CollectiveOp::kReduceScatter, CollectiveOp::kAllToAll, CollectiveOp::kSendRecv}) {
    for (DType dtype : kAllDTypes) {
      if (!Reduces(op)) {
        cases.push_back({op, ReduceOp::kSum, dtype});
        continue;
      }
      for (ReduceOp reduce : kAllReduceOps) cases.push_back({op, reduce, dtype});
    }
  }
  cases.push_back({CollectiveOp::kBarrier});  // moves no data: one case
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<CollectiveCase>& info) {
  const CollectiveCase& c = info.param;
  if (c.op == CollectiveOp::kBarrier) return "barrier";
  std::string name(client::CollectiveOpName(c.op));
  if (Reduces(c.op)) absl::StrAppend(&name, "_", ReduceOpName(c.reduce));
  return absl::StrCat(name, "_", DTypeName(c.dtype));
}

// Where a collective runs: a mesh, the mesh_dim given to the service, and the process groups that
// dim makes, each as mesh ranks in group-rank order.
struct Layout {
  std::string mesh;
  std::string mesh_dim;
  std::vector<std::vector<int64_t>> groups;
};

const std::vector<Layout>& Layouts() {
  static const auto* layouts = new std::vector<Layout>{
      {"line", "0", {{0, 1, 2, 3}}},
      // On the 2x2 grid, mesh rank 2*i + j sits at (i, j): a dim 0 group is a column, a dim 1
      // group a row. Dims are named ("dp") and indexed ("1"); "" is the whole mesh.
      {"grid", "dp", {{0, 2}, {1, 3}}},
      {"grid", "1", {{0, 1}, {2, 3}}},
      {"grid", "", {{0, 1, 2, 3}}},
  };
  return *layouts;
}

std::string InputName(DType dtype, int64_t rows) {
  return absl::StrCat("x_", DTypeName(dtype), "_", rows);
}

Shape InputShape(int64_t rows) { return {rows, 2, 3}; }

// The reference: plain single-process tensor code.

HostTensor Rows(const HostTensor& t, ChunkRange range) {
  Shape offsets(t.shape().size(), 0), sizes = t.shape();
  offsets[0] = range.offset;
  sizes[0] = range.size;
  return PackBlock(t, offsets, sizes).value();
}

HostTensor Concat(const std::vector<HostTensor>& parts) {
  Shape shape = parts[0].shape();
  shape[0] = 0;
  for (const HostTensor& p : parts) shape[0] += p.shape()[0];
  HostTensor out = HostTensor::Zeros(parts[0].dtype(), shape).value();
  size_t offset = 0;
  for (const HostTensor& p : parts) {
    if (p.nbytes() > 0) std::memcpy(out.data() + offset, p.data(), p.nbytes());
    offset += p.nbytes();
  }
  return out;
}

// op over the group's tensors in rank order; avg is the sum divided by the group size.
HostTensor Reduced(ReduceOp op, const std::vector<const HostTensor*>& in) {
  HostTensor out = in[0]->Clone();
  for (size_t i = 1; i < in.size(); ++i) {
    ReduceInto(op, out.dtype(), out.data(), in[i]->data(), out.num_elements());
  }
  if (op == ReduceOp::kAvg) {
    DivideInPlace(out.dtype(), out.data(), out.num_elements(), static_cast<int64_t>(in.size()));
  }
  return out;
}

// What group rank `r` holds after the collective on the group's inputs `in`, or nothing if it
// writes no output.
std::optional<HostTensor> Expected(const CollectiveCase& c,
                                   const std::vector<const HostTensor*>& in, int64_t r,
                                   int64_t root, int64_t peer) {
  const int64_t k = static_cast<int64_t>(in.size());
  const int64_t n = in[0]->shape()[0];
  switch (c.op) {
    case CollectiveOp::kBroadcast:
      return in[root]->Clone();
    case CollectiveOp::kAllReduce:
      return Reduced(c.reduce, in);
    case CollectiveOp::kReduce:
      if (r != root) return std::nullopt;
      return Reduced(c.reduce, in);
    case CollectiveOp::kAllGather:
    case CollectiveOp::kGather: {
      if (c.op == CollectiveOp::kGather && r != root) return std::nullopt;
      std::vector<HostTensor> parts;
      for (const HostTensor* t : in) parts.push_back(t->Clone());
      return Concat(parts);
    }
    case CollectiveOp::kScatter:
      return Rows(*in[root], ChunkOf(n, k, r));
    case CollectiveOp::kReduceScatter:
      return Rows(Reduced(c.reduce, in), ChunkOf(n, k, r));
    case CollectiveOp::kAllToAll: {
      std::vector<HostTensor> parts;
      for (const HostTensor* t : in) parts.push_back(Rows(*t, ChunkOf(n, k, r)));
      return Concat(parts);
    }
    case CollectiveOp::kSendRecv:
      if (r != peer) return std::nullopt;
      return in[root]->Clone();
    default:
      return std::nullopt;
  }
}

// How far a result may be from the reference, relative to its magnitude. Inputs are integers in
// [-8, 8], so sums (within ±32), maxima, minima and averages over 2 or 4 ranks (a division by a
// power of two) are exact in every dtype, whatever order the ranks combine in; integer products
// wrap, which no order changes; float16 holds every product of three inputs (up to 512 < 2^11)
// exactly, so a product of four rounds once in any order. bfloat16 (8 significant bits) may round a
// product of three already, and Gloo's all-reduce and reduce combine partial products in their own
// order (bcube, ring) rather than the reference's rank order: the two are then at most two
// roundings of 2^-8 apart. Reduce-scatter reduces in rank order, like the reference.
double Tolerance(const CollectiveCase& c, int64_t group_size) {
  const bool gloo_order = c.op == CollectiveOp::kAllReduce || c.op == CollectiveOp::kReduce;
  if (gloo_order && c.reduce == ReduceOp::kProduct && c.dtype == DType::kBFloat16 &&
      group_size > 2) {
    return 1.0 / 64;
  }
  return 0;
}

// What every mesh rank holds after the collective runs on `layout` with mesh rank r's input
// `inputs[r]`.
std::vector<std::optional<HostTensor>> ExpectedOnMesh(const CollectiveCase& c, const Layout& layout,
                                                      const std::vector<HostTensor>& inputs,
                                                      int64_t root, int64_t peer) {
  std::vector<std::optional<HostTensor>> want(inputs.size());
  for (const std::vector<int64_t>& group : layout.groups) {
    std::vector<const HostTensor*> in;
    for (int64_t rank : group) in.push_back(&inputs[rank]);
    for (size_t r = 0; r < group.size(); ++r) {
      want[group[r]] = Expected(c, in, static_cast<int64_t>(r), root, peer);
    }
  }
  return want;
}

std::string Describe(const std::string& name, DType dtype, const Shape& shape) {
  return absl::StrCat(name, ": ", DTypeName(dtype), ShapeToString(shape));
}

// One cluster for the whole suite: meshes "line" (4) and "grid" (2x2, dims "dp" and "tp"), each
// rank holding an input of every dtype and size.
class ClusterCollectiveTest : public ::testing::TestWithParam<CollectiveCase> {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new TestCluster;
    startup_ = cluster_->Start(TestClusterOptions(kWorkers));
    if (!startup_.ok()) return;
    Session& client = *cluster_->client;
    absl::StatusOr<client::MeshInfo> line =
        client::InitDeviceMesh(client, "cpu", {kWorkers}, {}, "line");
    absl::StatusOr<client::MeshInfo> grid =
        client::InitDeviceMesh(client, "cpu", {2, 2}, {"dp", "tp"}, "grid");
    if (!line.ok() || !grid.ok()) {
      startup_ = line.ok() ? grid.status() : line.status();
      return;
    }
    inputs_ = new std::map<std::pair<DType, int64_t>, std::vector<HostTensor>>;
    for (DType dtype : kAllDTypes) {
      for (int64_t rows : kRows) {
        std::vector<HostTensor>& per_rank = (*inputs_)[{dtype, rows}];
        for (int64_t rank = 0; rank < kWorkers; ++rank) {
          const uint32_t seed =
              static_cast<uint32_t>((static_cast<int>(dtype) * 100 + rows) * 10 + rank);
          per_rank.push_back(SmallIntegerTensor(dtype, InputShape(rows), seed));
          for (const char* mesh : {"line", "grid"}) {
            startup_ = client.PutLocal(mesh, rank, InputName(dtype, rows), per_rank.back());
            if (!startup_.ok()) return;
          }
        }
      }
    }
  }

  // The inputs must have come through every collective untouched.
  static void TearDownTestSuite() {
    if (startup_.ok()) {
      for (const auto& [key, per_rank] : *inputs_) {
        for (const char* mesh : {"line", "grid"}) {
          for (int64_t rank = 0; rank < kWorkers; ++rank) {
            absl::StatusOr<HostTensor> got =
                cluster_->client->GetLocal(mesh, rank, InputName(key.first, key.second));
            ASSERT_TRUE(got.ok()) << got.status();
            EXPECT_TRUE(TensorsMatch(*got, per_rank[rank]))
                << "input " << InputName(key.first, key.second) << " of rank " << rank
                << " on mesh '" << mesh << "' changed";
          }
        }
      }
    }
    delete inputs_;
    inputs_ = nullptr;
    cluster_->Stop();
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(startup_.ok()) << "the cluster did not start: " << startup_ << cluster_->LogHint();
  }

  enum class Mode { kSync, kAsync, kStream };
  void RunAndCheck(const CollectiveCase& c, Mode mode);

  static inline TestCluster* cluster_ = nullptr;
  static inline absl::Status startup_;
  static inline std::map<std::pair<DType, int64_t>, std::vector<HostTensor>>* inputs_ = nullptr;
  static inline int64_t next_output_ = 0;
};

// Runs case `c` on every layout and input size, one collective each, and compares every rank's
// output with the reference. kAsync starts every collective (async_op) before any is waited on,
// so the workers run them back to back as batches, and WaitCollectives reports them; kStream
// sends them all on one CollectiveStream and then reads the outcomes.
void ClusterCollectiveTest::RunAndCheck(const CollectiveCase& c, Mode mode) {
  const bool async = mode == Mode::kAsync;
  Session& client = *cluster_->client;
  struct Run {
    const Layout* layout;
    int64_t rows, root, peer;
    std::string output;
    absl::StatusOr<CollectiveResult> reply;
    int64_t work = 0;  // with kAsync
  };
  std::vector<Run> runs;
  std::map<std::string, std::vector<size_t>> started;  // by mesh: indices into `runs`
  std::unique_ptr<CollectiveStream> stream;
  if (mode == Mode::kStream) {
    absl::StatusOr<std::unique_ptr<CollectiveStream>> opened = client.OpenCollectiveStream();
    ASSERT_TRUE(opened.ok()) << opened.status();
    stream = *std::move(opened);
  }
  for (const Layout& layout : Layouts()) {
    const int64_t k = static_cast<int64_t>(layout.groups[0].size());
    for (size_t s = 0; s < std::size(kRows); ++s) {
      // Roots, senders and receivers move with the size so that every group rank takes each part.
      Run run{&layout,
              kRows[s],
              static_cast<int64_t>(s + 1) % k,
              static_cast<int64_t>(s) % k,
              absl::StrCat("y", next_output_++),
              absl::UnknownError("not run")};
      const CollectiveRequest request{c.op,
                                      {layout.mesh, layout.mesh_dim},
                                      InputName(c.dtype, run.rows),
                                      run.output,
                                      c.reduce,
                                      run.root,
                                      run.peer};
      if (stream) {
        ASSERT_TRUE(stream->Submit(request).ok());
        runs.push_back(std::move(run));
        continue;
      }
      if (async) {
        absl::StatusOr<client::Work> work = client.StartCollective(request);
        ASSERT_TRUE(work.ok()) << work.status();
        EXPECT_GT(work->id(), 0);
        EXPECT_EQ(work->mesh(), layout.mesh);
        run.work = work->id();
        started[layout.mesh].push_back(runs.size());
      } else {
        run.reply = client.RunCollective(request);
        ASSERT_TRUE(run.reply.ok()) << run.reply.status();
      }
      runs.push_back(std::move(run));
    }
  }
  if (stream) {
    EXPECT_EQ(stream->outstanding(), static_cast<int64_t>(runs.size()));
    for (Run& run : runs) run.reply = stream->Next();
    EXPECT_EQ(stream->Next().status().code(), absl::StatusCode::kFailedPrecondition);
  }
  for (const auto& [mesh, indices] : started) {
    std::vector<int64_t> works;
    for (size_t i : indices) works.push_back(runs[i].work);
    absl::StatusOr<std::vector<absl::StatusOr<CollectiveResult>>> outcomes =
        client.WaitCollectives(mesh, works, absl::Seconds(120));
    ASSERT_TRUE(outcomes.ok()) << outcomes.status();
    ASSERT_EQ(outcomes->size(), works.size());
    for (size_t j = 0; j < indices.size(); ++j) runs[indices[j]].reply = (*outcomes)[j];
    // Each work is reported once.
    EXPECT_EQ(client.WaitCollectives(mesh, {works[0]}).status().code(),
              absl::StatusCode::kNotFound);
  }

  for (const Run& run : runs) {
    const Layout& layout = *run.layout;
    const int64_t k = static_cast<int64_t>(layout.groups[0].size());
    SCOPED_TRACE(absl::StrCat("mesh '", layout.mesh, "' mesh_dim '", layout.mesh_dim, "', ",
                              DTypeName(c.dtype), ShapeToString(InputShape(run.rows)), ", root ",
                              run.root, ", peer ", run.peer,
                              mode == Mode::kSync ? ""
                              : async             ? ", async"
                                                  : ", stream"));
    ASSERT_TRUE(run.reply.ok()) << run.reply.status();
    const std::vector<std::optional<HostTensor>> want =
        ExpectedOnMesh(c, layout, inputs_->at({c.dtype, run.rows}), run.root, run.peer);
    // The reply lists the output of every rank that wrote one, in mesh rank order.
    std::vector<std::string> want_outputs, got_outputs;
    for (const std::optional<HostTensor>& w : want) {
      if (w) want_outputs.push_back(Describe(run.output, w->dtype(), w->shape()));
    }
    for (const client::LocalTensorInfo& t : run.reply->outputs) {
      got_outputs.push_back(Describe(t.name, t.dtype, t.shape));
    }
    EXPECT_EQ(got_outputs, want_outputs);

    for (int64_t rank = 0; rank < kWorkers; ++rank) {
      absl::StatusOr<HostTensor> got = client.GetLocal(layout.mesh, rank, run.output);
      if (!want[rank]) {
        EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound)
            << "mesh rank " << rank << " should have written no output; got " << got.status();
        continue;
      }
      ASSERT_TRUE(got.ok()) << "mesh rank " << rank << ": " << got.status();
      EXPECT_TRUE(TensorsMatch(*got, *want[rank], Tolerance(c, k))) << "mesh rank " << rank;
    }
  }
}

TEST_P(ClusterCollectiveTest, EveryGroupMatchesTheReference) {
  RunAndCheck(GetParam(), Mode::kSync);
}

TEST_P(ClusterCollectiveTest, PipelinedAsyncMatchesTheReference) {
  RunAndCheck(GetParam(), Mode::kAsync);
}

TEST_P(ClusterCollectiveTest, OneStreamMatchesTheReference) {
  RunAndCheck(GetParam(), Mode::kStream);
}

INSTANTIATE_TEST_SUITE_P(AllCollectives, ClusterCollectiveTest, ::testing::ValuesIn(AllCases()),
                         CaseName);

// A chain of async collectives on the 2x2 grid, each reading the output of the one before while
// that one is still queued or running, over every kind of group (a dim by name, a dim by index,
// the whole mesh): started without waiting, then checked stage by stage against the reference.
// (8 rows, so that the reduce-scatter over 4 ranks leaves equal shapes for the all-reduce after.)
class ClusterAsyncChainTest : public ClusterCollectiveTest {};

TEST_P(ClusterAsyncChainTest, EachStageReadsTheOneBefore) {
  const DType dtype = GetParam().dtype;
  Session& client = *cluster_->client;
  const std::vector<Layout>& layouts = Layouts();  // [1] grid "dp", [2] grid "1", [3] grid ""
  struct Stage {
    CollectiveCase c;
    const Layout* layout;
    std::string input, output;
    int64_t root;
  };
  const std::string tag = absl::StrCat("chain_", DTypeName(dtype), "_");
  const std::vector<Stage> stages = {
      {{CollectiveOp::kAllReduce, ReduceOp::kSum, dtype},
       &layouts[2],
       InputName(dtype, 8),
       tag + "a",
       0},
      {{CollectiveOp::kAllGather, ReduceOp::kSum, dtype}, &layouts[1], tag + "a", tag + "b", 0},
      {{CollectiveOp::kReduceScatter, ReduceOp::kMax, dtype}, &layouts[3], tag + "b", tag + "c", 0},
      {{CollectiveOp::kAllReduce, ReduceOp::kMin, dtype}, &layouts[2], tag + "c", tag + "c", 0},
      {{CollectiveOp::kBroadcast, ReduceOp::kSum, dtype}, &layouts[1], tag + "c", tag + "d", 1},
  };
  std::vector<client::Work> works;
  for (const Stage& stage : stages) {
    const CollectiveRequest request{stage.c.op,     {"grid", stage.layout->mesh_dim},
                                    stage.input,    stage.output,
                                    stage.c.reduce, stage.root};
    absl::StatusOr<client::Work> work = client.StartCollective(request);
    ASSERT_TRUE(work.ok()) << stage.output << ": " << work.status();
    works.push_back(*std::move(work));
  }
  // Each Work waits for its own collective, once.
  for (size_t i = 0; i < stages.size(); ++i) {
    absl::StatusOr<CollectiveResult> outcome = works[i].Wait(absl::Seconds(120));
    EXPECT_TRUE(outcome.ok()) << stages[i].output << ": " << outcome.status();
  }
  EXPECT_EQ(works[0].Wait().status().code(), absl::StatusCode::kNotFound);

  std::map<std::string, std::vector<HostTensor>> held;
  for (const HostTensor& t : inputs_->at({dtype, 8}))
    held[InputName(dtype, 8)].push_back(t.Clone());
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& stage = stages[i];
    std::vector<std::optional<HostTensor>> want =
        ExpectedOnMesh(stage.c, *stage.layout, held.at(stage.input), stage.root, 0);
    std::vector<HostTensor>& out = held[stage.output];
    out.clear();
    for (std::optional<HostTensor>& w : want) out.push_back(*std::move(w));
    // Later stages overwrite "c": only the last writer of a name is checked on the workers.
    bool last_writer = true;
    for (size_t j = i + 1; j < stages.size(); ++j) last_writer &= stages[j].output != stage.output;
    if (!last_writer) continue;
    for (int64_t rank = 0; rank < kWorkers; ++rank) {
      absl::StatusOr<HostTensor> got = client.GetLocal("grid", rank, stage.output);
      ASSERT_TRUE(got.ok()) << stage.output << " of rank " << rank << ": " << got.status();
      EXPECT_TRUE(TensorsMatch(*got, out[rank])) << stage.output << " of rank " << rank;
    }
  }
  for (const char* name : {"a", "b", "c", "d"}) {
    EXPECT_TRUE(client.DeleteLocal("grid", tag + name).ok()) << tag << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    SomeDTypes, ClusterAsyncChainTest,
    ::testing::Values(CollectiveCase{CollectiveOp::kBarrier, ReduceOp::kSum, DType::kFloat32},
                      CollectiveCase{CollectiveOp::kBarrier, ReduceOp::kSum, DType::kInt32},
                      CollectiveCase{CollectiveOp::kBarrier, ReduceOp::kSum, DType::kBFloat16}),
    [](const ::testing::TestParamInfo<CollectiveCase>& info) {
      return std::string(DTypeName(info.param.dtype));
    });

}  // namespace
}  // namespace tessera
